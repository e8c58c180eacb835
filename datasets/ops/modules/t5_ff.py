# T5's feed-forward sublayer: T5LayerNorm (RMS, no mean, no bias) -> wi -> ReLU -> wo, residual.
import torch
import torch.nn as nn


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super(T5LayerNorm, self).__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


class Model(nn.Module):
    def __init__(self, d_model, d_ff):
        super(Model, self).__init__()
        self.layer_norm = T5LayerNorm(d_model)
        self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, hidden_states):
        h = self.wo(torch.relu(self.wi(self.layer_norm(hidden_states))))
        return hidden_states + h


batch_size = 2
seq_len = 16
d_model = 32
d_ff = 64


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, d_ff]
