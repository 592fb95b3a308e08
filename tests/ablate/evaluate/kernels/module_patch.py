"""Rebinding what the old driver looked up at call time (torch.equal, os.pwrite, socket.send_fds,
json.dumps, builtins.len) and returning garbage: the driver calls what it bound before this file
ran, so the garbage is judged as garbage, and the rebinding itself is reported."""
import builtins
import json
import os
import socket

import torch

torch.equal = lambda a, b: True
os.pwrite = lambda fd, data, offset: len(data)
socket.send_fds = lambda *a, **k: None
json.dumps = lambda obj, **k: '{"kind": "timing"}'
builtins.len = lambda obj: 0


def kernel(x, weight):
    return torch.zeros_like(x)
