# Causal multi-head attention with ALiBi linear position biases (BLOOM / MPT) instead of embeddings.
import math

import torch
import torch.nn as nn


def alibi_slopes(num_heads):
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != num_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes, dtype=torch.float32)


class Model(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super(Model, self).__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        pos = torch.arange(T, device=x.device)
        distance = (pos[None, :] - pos[:, None]).float()
        scores = scores + self.slopes.view(1, -1, 1, 1) * distance
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        y = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, C)
        return self.out(y)


batch_size = 2
seq_len = 16
hidden_size = 32
num_heads = 4


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, num_heads]
