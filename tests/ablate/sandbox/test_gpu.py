"""On a CUDA machine: the confined agent gets the GPU and still nothing else."""
import socket

import pytest

from ablate.sandbox import Limits, Workspace, core_tools

pytestmark = pytest.mark.gpu

CUDA_CHECK = """
import os, torch
x = torch.randn(1024, 1024, device="cuda")
print("device", torch.cuda.get_device_name(), "interpret", os.environ.get("TRITON_INTERPRET"))
print("matmul_ok", torch.allclose(x @ x, (x.double() @ x.double()).float(), atol=1e-2, rtol=1e-2))
"""

TRITON_GPU = """
import torch, triton
import triton.language as tl

@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + tl.load(y_ptr + i, mask=i < n), mask=i < n)

x, y = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
out = torch.empty_like(x)
add[(16,)](x, y, out, 4096, BLOCK=256)
torch.cuda.synchronize()
print("triton_max_err", (out - (x + y)).abs().max().item())
"""


@pytest.fixture
def ws(tmp_path):
    return Workspace.create(tmp_path / "ws", {"check.py": CUDA_CHECK.encode(), "tri.py": TRITON_GPU.encode()},
                            Limits(command_timeout_s=300))


def test_cuda_runs_inside_the_sandbox(ws):
    assert ws.gpu_visible, ws.describe()
    r = core_tools(ws)["bash"].run({"command": "python check.py"})
    assert not r.is_error, (r.content, ws.describe())
    assert "matmul_ok True" in r.content and "interpret None" in r.content
    assert r.gpu_seconds == r.seconds > 0


def test_triton_compiles_for_the_gpu_inside(ws):
    r = core_tools(ws)["bash"].run({"command": "python tri.py && ls .cache/triton | head -3"})
    assert not r.is_error, r.content
    assert "triton_max_err 0.0" in r.content


def test_network_stays_off_with_the_gpu(ws):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    r = ws.run(f"python -c \"import socket, torch; torch.cuda.init(); socket.create_connection(('127.0.0.1', {port}), timeout=3)\"")
    srv.close()
    assert r.exit_code != 0 and "Connection refused" in r.output


def test_gpu_false_hides_the_gpu(tmp_path):
    ws = Workspace.create(tmp_path / "ws", {"check.py": b"import os, torch; print(torch.cuda.is_available(), os.environ['TRITON_INTERPRET'])"},
                          Limits(gpu=False, command_timeout_s=120))
    r = core_tools(ws)["bash"].run({"command": "python check.py; ls /dev | grep -c nvidia"})
    assert "False 1" in r.content and r.content.split("\n")[1].strip() == "0"
    assert r.gpu_seconds == 0.0
