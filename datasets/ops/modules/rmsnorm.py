# RMSNorm as in Llama / T5 (written out: nn.RMSNorm does not exist in torch 1.13).
import torch
import torch.nn as nn


class Model(nn.Module):
    """Root-mean-square layer norm over the hidden dimension, in float32 like LlamaRMSNorm."""

    def __init__(self, hidden_size, eps=1e-6):
        super(Model, self).__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


batch_size = 2
seq_len = 16
hidden_size = 32


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size]
