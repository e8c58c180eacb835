# Fixture: nn.Linear (in training mode, as KernelBench runs it) then tanh: a calibration per claimed
# precision on a model with parameters.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(256, 128)

    def forward(self, x):
        return torch.tanh(self.linear(x))


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
