# Fixture: BatchNorm2d in training mode (batch statistics): deterministic, not stochastic.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(8, 4, 6, 6)]


def get_init_inputs():
    return [4]
