# Fixture: a live nn.Dropout(p=0.5) in training mode (KernelBench's): stochastic.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(p=0.5)

    def forward(self, x):
        return self.drop(x)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
