"""The device: which one, what it is, its L2, and its measured ceilings (copy GB/s, matmul TFLOP/s)."""
from __future__ import annotations

import ctypes
import importlib.metadata
import re
import statistics

import torch

_STATE: dict = {}  # per-process: the L2 flush buffer


def resolve_device(request: str) -> str:
    if request == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if request == "cuda":
        raise RuntimeError("device 'cuda' requested but torch sees no CUDA device")
    return "cpu"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def driver_version() -> str | None:
    try:
        text = open("/proc/driver/nvidia/version").read()
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return m.group(1) if m else None


def device_info(device: str) -> dict:
    info = {"name": "cpu", "torch": torch.__version__, "triton": _version("triton"), "driver": None, "cuda": None}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, driver=driver_version(), cuda=torch.version.cuda,
                    l2_bytes=int(getattr(props, "L2_cache_size", 0)) or None)
    return info


def library_versions() -> dict:
    """Versions that can change a baseline's time (part of the baseline cache key)."""
    names = ("torch", "triton", "liger-kernel", "cupy-cuda12x", "cupy-cuda13x", "flashinfer-python", "quack-kernels")
    return {n: v for n in names if (v := _version(n))}


def flush_buffer() -> torch.Tensor:
    """A buffer larger than L2 (at least 256 MB, as triton's do_bench); zeroing it evicts L2."""
    if "flush" not in _STATE:
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        _STATE["flush"] = torch.empty(max(256 << 20, 4 * l2), dtype=torch.int8, device="cuda")
    return _STATE["flush"]


class L2Guard:
    """Persisting-L2 state through the driver API: detect it (reserved set-aside, an access-policy
    window on the timing stream) and reset it before each timed call, so nothing survives the flush."""

    LIMIT = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    WINDOW = 1  # CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW

    def __init__(self):
        self.lib = None
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return
        self._zero_window = (ctypes.c_ubyte * 64)()  # CUstreamAttrValue (a 64-byte union), all zero
        # The state before the candidate is imported. A driver or platform may start with a non-zero
        # persisting-L2 limit; only a change the candidate makes counts (and reset restores this).
        self.baseline = self._state()

    @property
    def available(self) -> bool:
        return self.lib is not None

    def _state(self) -> tuple[int | None, int | None]:
        """(persisting-L2 limit, access-policy window bytes on the current stream); None where unreadable."""
        limit = ctypes.c_size_t(0)
        limit_value = limit.value if self.lib.cuCtxGetLimit(ctypes.byref(limit), self.LIMIT) == 0 else None
        value = (ctypes.c_ubyte * 64)()
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        window = None
        if self.lib.cuStreamGetAttribute(stream, self.WINDOW, ctypes.byref(value)) == 0:
            window = ctypes.c_size_t.from_buffer(value, 8).value  # CUaccessPolicyWindow.num_bytes
        return limit_value, window

    def used(self) -> bool:
        """True when the kernel raised the persisting-L2 limit or set an access-policy window."""
        if not self.lib:
            return False
        limit, window = self._state()
        base_limit, base_window = self.baseline
        grew = lambda now, before: now is not None and now > (before or 0)  # noqa: E731
        return grew(limit, base_limit) or grew(window, base_window)

    def reset(self) -> None:
        if not self.lib:
            return
        self.lib.cuCtxSetLimit(self.LIMIT, ctypes.c_size_t(self.baseline[0] or 0))
        self.lib.cuCtxResetPersistingL2Cache()
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.lib.cuStreamSetAttribute(stream, self.WINDOW, ctypes.byref(self._zero_window))


def _event_median_ms(fn, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


COPY_BYTES = (256 << 20, 1 << 30, 2 << 30)  # one buffer each way
MATMUL_N = (4096, 8192, 16384)  # square bf16 products


def ceiling_rows(timer=None) -> list[dict]:
    """Each size measured: device-to-device copies (rate: bytes read + written per second) and
    bf16 matmuls (flops per second). timer(fn) -> ms; CUDA events by default. A single size
    under-reads a ceiling and would let kernels 'beat physics': the ceilings are the best rows."""
    timer = timer or (lambda fn: _event_median_ms(fn, 20))
    rows = []
    for size in COPY_BYTES:
        src = torch.empty(size, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        ms = timer(lambda: dst.copy_(src))  # noqa: B023  (called before the loop moves on)
        rows.append({"what": "copy", "bytes": 2 * size, "ms": ms, "rate": 2 * size / (ms * 1e-3)})
        del src, dst
    for n in MATMUL_N:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        ms = timer(lambda: a @ b)  # noqa: B023
        rows.append({"what": "matmul", "shape": f"{n}x{n}x{n}", "ms": ms, "rate": 2 * n**3 / (ms * 1e-3)})
        del a, b
    torch.cuda.empty_cache()
    return rows


def best_rates(rows: list[dict]) -> tuple[float, float]:
    """(copy bytes/s, matmul flops/s): the best row of each kind."""
    return (max(r["rate"] for r in rows if r["what"] == "copy"),
            max(r["rate"] for r in rows if r["what"] == "matmul"))


def measure_ceilings() -> dict:
    """The GPU's ceilings as the evaluator uses and caches them."""
    copy, matmul = best_rates(ceiling_rows())
    return {"copy_gbps": round(copy / 1e9, 1), "matmul_tflops": round(matmul / 1e12, 1)}


def cpu_threads_warm() -> None:
    """Start torch's intra-op thread pool now, so threads it starts later are not blamed on the kernel."""
    torch.ones(1 << 20).sum()
