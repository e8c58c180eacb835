# Fixture: a Model that puts itself in eval mode: the record states what ran (eval), not the default.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(p=0.5)
        self.eval()

    def forward(self, x):
        return self.drop(x) + 1.0


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
