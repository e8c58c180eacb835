# Fixture: torch.mean(x, 1) over 16,384 torch.rand columns (issue 31: half of each row passed the
# published tolerance; fp32's own error here is ~1e-7, so the calibrated bound refuses it).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, 1)


def get_inputs():
    return [torch.rand(32, 16384)]


def get_init_inputs():
    return []
