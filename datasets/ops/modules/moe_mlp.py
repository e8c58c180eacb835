# A sparse mixture-of-experts MLP (Mixtral style): a router picks the top-2 of num_experts SwiGLU
# experts per token and mixes their outputs by the renormalized router weights.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super(Expert, self).__init__()
        self.w1 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w3 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w2 = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Model(nn.Module):
    def __init__(self, hidden_size, intermediate_size, num_experts, top_k=2):
        super(Model, self).__init__()
        self.top_k = top_k
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList([Expert(hidden_size, intermediate_size) for _ in range(num_experts)])

    def forward(self, hidden_states):
        bsz, seq, hidden = hidden_states.shape
        x = hidden_states.reshape(-1, hidden)
        routing = torch.softmax(self.gate(x), dim=-1)
        weights, selected = torch.topk(routing, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.nonzero(selected == e, as_tuple=True)
            if token_idx.numel() == 0:
                continue
            out.index_add_(0, token_idx, expert(x[token_idx]) * weights[token_idx, slot].unsqueeze(-1))
        return out.reshape(bsz, seq, hidden)


batch_size = 2
seq_len = 8
hidden_size = 16
intermediate_size = 32
num_experts = 4


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, intermediate_size, num_experts]
