"""Runs a timed batch's calls as one, decided on the device: the hole docs/evaluator.md states,
kept to measure it (`python -m benchmarks.judge_clock fusion`), not a defence's test. Every call
of a batch is queued before the gate opens, so when the first call's kernels run every later
call's addresses are settled. Each call writes its input and output addresses into a table in pinned host memory
and returns its output; the batch's first call launches a copy of that table to the device and one
kernel over all its calls, and the others launch nothing. The calls' outputs are all right when
the batch ends. On a CPU the interpreter runs those kernels at their launch, when the table holds
the first call alone: the other calls' outputs are never written. FUSE = False: the same kernel,
launched by each call on its own call (what the fused run is compared with), each call's table
from a ring no batch wraps around: a table freed after its launch goes back to torch's pinned
memory cache, which hands it to the next call before the device has read it."""
import time

import torch
import triton
import triton.language as tl

FUSE = True
MAX_CALLS = 1024  # above the judge's 512 a batch
PROGRAMS = 264  # two a streaming multiprocessor on an H200
RING = 2 * MAX_CALLS  # FUSE = False: tables a call, reused only after a batch longer than any


@triton.jit
def _table_to_device(host_addr, dev_ptr, MAX: tl.constexpr):
    """The table (count, then x, w, y addresses a call), read when this runs: after the gate."""
    host = host_addr.to(tl.pointer_type(tl.int64))
    n = tl.load(host)
    i = tl.arange(0, MAX)
    tl.store(dev_ptr + 1 + i, tl.load(host + 1 + i, mask=i < 3 * n, other=0), mask=i < 3 * n)
    tl.store(dev_ptr, n)


@triton.jit
def _rows(table_ptr, M, N, eps, BLOCK: tl.constexpr):
    calls = tl.load(table_ptr)
    pid, programs = tl.program_id(0), tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    for c in range(0, calls):
        x_ptr = tl.load(table_ptr + 1 + 3 * c).to(tl.pointer_type(tl.bfloat16))
        w_ptr = tl.load(table_ptr + 2 + 3 * c).to(tl.pointer_type(tl.bfloat16))
        y_ptr = tl.load(table_ptr + 3 + 3 * c).to(tl.pointer_type(tl.bfloat16))
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        for row in range(pid, M, programs):
            x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
            tl.store(y_ptr + row * N + cols, (x * rstd * w).to(tl.bfloat16), mask=mask)


_batches: dict = {}


def _launch(table_host, table_dev, M, N):
    _table_to_device[(1,)](table_host.data_ptr(), table_dev, MAX=triton.next_power_of_2(3 * MAX_CALLS))
    _rows[(min(PROGRAMS, M),)](table_dev, M, N, 1e-6, BLOCK=triton.next_power_of_2(N))


def _apart(x, weight, y):
    """One call, launched on its own: a table (count 1, then the call's addresses) from the ring."""
    ring = _batches.get("ring")
    if ring is None:
        ring = _batches["ring"] = {"next": 0, "host": torch.zeros(RING, 4, dtype=torch.int64, pin_memory=x.is_cuda),
                                   "dev": torch.zeros(RING, 4, dtype=torch.int64, device=x.device)}
    k = ring["next"] = (ring["next"] + 1) % RING
    host = ring["host"][k]
    host[0], host[1], host[2], host[3] = 1, x.data_ptr(), weight.data_ptr(), y.data_ptr()
    _launch(host, ring["dev"][k], *x.shape)
    return y


def kernel(x, weight):
    M, N = x.shape
    if not FUSE:
        return _apart(x, weight, torch.empty_like(x))
    st = _batches.setdefault((M, N), {"last": None, "n": MAX_CALLS})
    now = time.perf_counter()
    first = st["last"] is None or now - st["last"] > 2e-3 or st["n"] >= MAX_CALLS
    y = torch.empty_like(x)
    if first:  # a new batch (calls of one are queued microseconds apart, batches milliseconds)
        st["host"] = torch.zeros(1 + 3 * MAX_CALLS, dtype=torch.int64, pin_memory=x.is_cuda)
        st["dev"] = torch.zeros(1 + 3 * MAX_CALLS, dtype=torch.int64, device=x.device)
        st["n"] = 0
    host, n = st["host"], st["n"]
    host[1 + 3 * n], host[2 + 3 * n], host[3 + 3 * n] = x.data_ptr(), weight.data_ptr(), y.data_ptr()
    host[0] = n + 1
    st["n"] = n + 1
    if first:
        _launch(host, st["dev"], M, N)
    st["last"] = time.perf_counter()  # from the call's end: under the interpreter a launch takes ms
    return y
