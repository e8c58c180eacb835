# Fixture: (x * s + y) - x * s on randn: in float64 it is y; in fp32 the rounding of x * s (~1e5,
# an ulp of ~0.008) is left over in a value ~1, so on a few elements in a million the fp32 reference
# itself misses atol = rtol = 1e-2 against float64 (as KernelBench's Mamba2 tasks, whose sums of
# ~1e12 terms cancel to ~20). An exact kernel (it returns y) misses the gate against the fp32
# reference on those elements.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return (x * 66000.0 + y) - x * 66000.0


def get_inputs():
    return [torch.randn(1024, 1024), torch.randn(1024, 1024)]


def get_init_inputs():
    return []
