# Rotary position embedding (RoPE) applied to query and key, as in Llama's apply_rotary_pos_emb.
import torch
import torch.nn as nn


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    """Precomputed cos/sin tables (buffers) for positions 0..max_positions-1; rotates q and k."""

    def __init__(self, head_dim, max_positions, base=10000.0):
        super(Model, self).__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        positions = torch.arange(max_positions, dtype=torch.float32)
        freqs = torch.outer(positions, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, q, k):
        seq = q.shape[-2]
        cos = self.cos_cached[:seq][None, None, :, :]
        sin = self.sin_cached[:seq][None, None, :, :]
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed


batch_size = 2
num_heads = 4
seq_len = 16
head_dim = 16


def get_inputs():
    return [torch.randn(batch_size, num_heads, seq_len, head_dim),
            torch.randn(batch_size, num_heads, seq_len, head_dim)]


def get_init_inputs():
    return [head_dim, seq_len]
