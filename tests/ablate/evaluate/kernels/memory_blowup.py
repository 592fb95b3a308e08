"""Allocates host memory until something stops it."""
import torch

_hoard = []


def kernel(x, weight):
    while True:
        _hoard.append(torch.ones(64 << 20, dtype=torch.uint8))  # 64 MiB at a time, touched
