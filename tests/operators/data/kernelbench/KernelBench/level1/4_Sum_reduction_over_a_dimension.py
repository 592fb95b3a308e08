import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over one dimension, kept: an integer argument from get_init_inputs."""

    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(4, 50, 3)]


def get_init_inputs():
    return [1]
