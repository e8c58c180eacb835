# Grouped-query attention (Llama 2/3, Qwen2): fewer key/value heads, each shared by a group of
# query heads; causal, written out with matmul + softmax (no scaled_dot_product_attention in 1.13).
import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size, num_heads, num_kv_heads):
        super(Model, self).__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

    def forward(self, hidden_states):
        bsz, q_len, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        groups = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.ones(q_len, q_len, dtype=torch.bool, device=hidden_states.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(out)


batch_size = 2
seq_len = 16
hidden_size = 32
num_heads = 4
num_kv_heads = 2


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, num_heads, num_kv_heads]
