"""The device: which one, what it is, its L2, and its speed-of-light ceilings.

A ceiling is physical: the higher of the vendor's datasheet peak and the best rate measured here
(device-to-device copy, read-only and write-only streams for bandwidth; bf16 matrix products for
compute), so no kernel and no library can run faster than the floor it gives. A single measured
size under-reads a ceiling and would let kernels 'beat physics': the measured rates are the best
of several sizes."""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import re
import statistics
import time

import torch

_STATE: dict = {}  # per-process: the L2 flush buffer

# Vendor datasheet peaks (dense, no sparsity): HBM bytes/s and bf16 tensor-core FLOP/s. Matched
# in order against the device name; more specific names first.
DATASHEET = (
    ("H200", 4.8e12, 989e12),  # NVIDIA H200 SXM datasheet
    ("H100 NVL", 3.9e12, 835e12),
    ("H100 PCIe", 2.0e12, 756e12),
    ("H100", 3.35e12, 989e12),  # H100 SXM
    ("GB200", 8.0e12, 2500e12),
    ("B200", 8.0e12, 2250e12),
    ("B100", 8.0e12, 1750e12),
    ("A100-SXM4-80GB", 2.039e12, 312e12),
    ("A100", 1.555e12, 312e12),
    ("L40S", 0.864e12, 362e12),
    ("RTX 4090", 1.008e12, 165e12),
)


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
                    l2_bytes=int(getattr(props, "L2_cache_size", 0)) or None, memory_bytes=int(props.total_memory))
    return info


# the packages whose versions can change a baseline's time or output, or whether it can run (every
# optional library's among them: a cached "not installed" is asked again once it is installed)
VERSIONED = ("torch", "triton", "liger-kernel", "cupy-cuda12x", "cupy-cuda13x", "flashinfer-python", "quack-kernels")


def library_versions() -> dict:
    """Versions of VERSIONED's packages installed here (part of every cache key of the judge)."""
    return {n: v for n in VERSIONED if (v := _version(n))}


def flush_buffer() -> torch.Tensor:
    """A buffer larger than L2 (at least 256 MB, as triton's do_bench); zeroing it evicts L2."""
    if "flush" not in _STATE:
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        _STATE["flush"] = torch.empty(max(256 << 20, 4 * l2), dtype=torch.int8, device="cuda")
    return _STATE["flush"]


class DeviceLock:
    """One user of a GPU's clock at a time, across the processes and users of this machine: two
    studies, a rescore beside a study, or a judge left over from a killed run would otherwise time
    on the same device at once and each read the other's work into its numbers. An flock on a file
    named for the GPU's UUID; the kernel releases it if the holder dies. A trial holds it from its
    agent's first turn to its verdict (its agent benchmarks on the GPU too), and the judges that
    trial starts go ahead under it (`parent_may_hold`); a judge started elsewhere holds it from its
    first measurement to its verdict. ABLATE_GPU_LOCK_DIR moves the file (default /tmp). It
    coordinates ablate's own processes; it is no defence against a local user (nor an unconfined
    agent) who writes into the file or uses the GPU directly. Confined agents and candidates have
    a private /tmp and never see it."""

    POLL_S = 0.1
    REMIND_S = 60.0  # a waiting judge's caller hears from it at least this often (its own limit is an hour)

    def __init__(self, key: str, directory: str | None = None):
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)
        where = directory or os.environ.get("ABLATE_GPU_LOCK_DIR") or "/tmp"
        self.path = os.path.join(where, f"ablate-gpu-{safe}.lock")
        self.fd: int | None = None
        self.why: str | None = None
        self.by_parent = False  # held by the process that started this one (a trial, for its judge)

    @classmethod
    def for_current_device(cls) -> "DeviceLock":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        return cls(str(uuid) if uuid else f"{props.name}-{os.environ.get('CUDA_VISIBLE_DEVICES', '')}-{index}")

    def acquire(self, note, doing: str = "", parent_may_hold: bool = False) -> bool:
        """Wait for the GPU (saying so through `note` while another holds it). parent_may_hold:
        when the holder is this process's parent, go ahead under its hold (`by_parent`). False,
        with `why`, when the lock file cannot be used: the caller reports that, it does not wait."""
        import fcntl

        try:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                writable = True
            except PermissionError:  # another user's file: flock needs no write access
                fd, writable = os.open(self.path, os.O_RDONLY), False
        except OSError as e:
            self.why = f"{self.path}: {e.strerror or e}"
            return False
        try:
            os.fchmod(fd, 0o666)  # other users' evaluations wait on the same file
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder(fd)
            if parent_may_hold and holder.startswith(f"pid {os.getppid()} "):
                os.close(fd)  # the trial that started this judge holds the GPU for it
                self.by_parent = True
                return True
            note(f"waiting for the GPU: {holder} is using it (one user of its clock at a time)")
            t0 = last = time.monotonic()
            while True:  # polled, not blocked on: a line every minute keeps the caller informed (and waiting)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    time.sleep(self.POLL_S)
                if time.monotonic() - last >= self.REMIND_S:
                    last = time.monotonic()
                    note(f"still waiting for the GPU ({last - t0:.0f} s): {self._holder(fd)} is using it")
            note(f"the GPU is free after {time.monotonic() - t0:.0f} s")
        except OSError as e:
            os.close(fd)
            self.why = f"{self.path}: {e.strerror or e}"
            return False
        if writable:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} ({doing or 'an evaluation'})".encode(), 0)
        self.fd = fd
        return True

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            return os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        except OSError:
            return "another process"

    def release(self) -> None:
        self.by_parent = False
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None


class L2Guard:
    """Persisting-L2 state through the driver API: detect it (reserved set-aside, an access-policy
    window on the timing stream) and reset it before each timed call, so nothing survives the flush.
    Made before any submitted code runs; it holds the ctypes pieces and the stream it watches."""

    LIMIT = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    WINDOW = 1  # CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW

    def __init__(self, stream=None):
        self.lib = None
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return
        self._size_t, self._byref, self._buf = ctypes.c_size_t, ctypes.byref, ctypes.c_ubyte * 64
        self._get_limit, self._set_limit = self.lib.cuCtxGetLimit, self.lib.cuCtxSetLimit
        self._get_attr, self._set_attr = self.lib.cuStreamGetAttribute, self.lib.cuStreamSetAttribute
        self._reset_l2 = self.lib.cuCtxResetPersistingL2Cache
        self._stream = ctypes.c_void_p((stream or torch.cuda.current_stream()).cuda_stream)
        self._zero_window = self._buf()  # CUstreamAttrValue (a 64-byte union), all zero
        # The state before the candidate is imported. A driver or platform may start with a non-zero
        # persisting-L2 limit; only a change the candidate makes counts (and reset restores this).
        self.baseline = self._state()

    @property
    def available(self) -> bool:
        return self.lib is not None

    def _state(self) -> tuple[int | None, int | None]:
        """(persisting-L2 limit, access-policy window bytes on the timing stream); None where unreadable."""
        limit = self._size_t(0)
        limit_value = limit.value if self._get_limit(self._byref(limit), self.LIMIT) == 0 else None
        value = self._buf()
        window = None
        if self._get_attr(self._stream, self.WINDOW, self._byref(value)) == 0:
            window = self._size_t.from_buffer(value, 8).value  # CUaccessPolicyWindow.num_bytes
        return limit_value, window

    def used(self) -> bool:
        """True when the kernel raised the persisting-L2 limit or set an access-policy window."""
        if not self.lib:
            return False
        limit, window = self._state()
        base_limit, base_window = self.baseline
        return (limit is not None and limit > (base_limit or 0)) or (window is not None and window > (base_window or 0))

    def reset(self) -> None:
        if not self.lib:
            return
        self._set_limit(self.LIMIT, self._size_t(self.baseline[0] or 0))
        self._reset_l2()
        self._set_attr(self._stream, self.WINDOW, self._byref(self._zero_window))


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


STREAM_BYTES = (256 << 20, 1 << 30, 2 << 30)  # one buffer each way
MATMUL_N = (4096, 8192, 16384)  # square bf16 products


def ceiling_rows(timer=None) -> list[dict]:
    """Each size measured: device-to-device copies (bytes read + written per second), read-only
    (a sum) and write-only (a fill) streams, and bf16 matmuls (flops per second).
    timer(fn) -> ms; CUDA events by default."""
    timer = timer or (lambda fn: _event_median_ms(fn, 20))
    rows = []
    for size in STREAM_BYTES:
        src = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        ms = timer(lambda: dst.copy_(src))  # noqa: B023  (called before the loop moves on)
        rows.append({"what": "copy", "bytes": 2 * size, "ms": ms, "rate": 2 * size / (ms * 1e-3)})
        ms = timer(lambda: src.sum())  # noqa: B023
        rows.append({"what": "read", "bytes": size, "ms": ms, "rate": size / (ms * 1e-3)})
        ms = timer(lambda: dst.fill_(1.0))  # noqa: B023
        rows.append({"what": "write", "bytes": size, "ms": ms, "rate": size / (ms * 1e-3)})
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
    """(bytes/s, matmul flops/s): the best measured row of each kind."""
    return (max(r["rate"] for r in rows if r["what"] in ("copy", "read", "write")),
            max(r["rate"] for r in rows if r["what"] == "matmul"))


def datasheet(name: str) -> tuple[float, float] | None:
    for key, bw, flops in DATASHEET:
        if key in name:
            return bw, flops
    return None


def physical_ceilings(name: str, measured_bw: float, measured_flops: float) -> dict:
    """The ceilings the floor and speed-of-light use: max(datasheet, measured) of each kind."""
    sheet = datasheet(name) or (0.0, 0.0)
    return {"copy_gbps": round(max(sheet[0], measured_bw) / 1e9, 1),
            "matmul_tflops": round(max(sheet[1], measured_flops) / 1e12, 1),
            "measured_gbps": round(measured_bw / 1e9, 1), "measured_tflops": round(measured_flops / 1e12, 1),
            "datasheet_gbps": round(sheet[0] / 1e9, 1) or None, "datasheet_tflops": round(sheet[1] / 1e12, 1) or None}


def measure_ceilings() -> dict:
    """The GPU's ceilings as the evaluator uses and caches them, with the canary copy's rate
    measured beside them (what `contention` compares against)."""
    bw, flops = best_rates(ceiling_rows())
    return {**physical_ceilings(torch.cuda.get_device_name(), bw, flops), "canary_gbps": round(canary_gbps(), 1)}


# Anything else running on the GPU shows as a slower copy: run beside ours (MPS), it takes
# bandwidth; time-sliced with ours (the default between processes), it takes turns. A call timed
# on its own can fit between another context's turns, so the canary is one window of copies
# longer than a time slice. It runs after a measurement, while this process's GPU is idle.
CANARY_BYTES = 256 << 20
CANARY_COPIES = 200  # ~25 ms on an H200
CONTENDED = 0.8  # the canary at under this fraction of its rate when the ceilings were measured


def canary_gbps() -> float:
    """GB/s (read + written) over CANARY_COPIES back-to-back device-to-device copies of CANARY_BYTES."""
    src = torch.empty(CANARY_BYTES // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CANARY_COPIES):
        dst.copy_(src)
    end.record()
    end.synchronize()
    return CANARY_COPIES * 2 * CANARY_BYTES / (start.elapsed_time(end) * 1e-3) / 1e9


def contention(ceilings: dict | None, rate=canary_gbps) -> str | None:
    """Why the GPU looks shared with another process right now, or None. Twice below CONTENDED
    (the better of two canaries): one slow copy is jitter, two are a load."""
    idle = (ceilings or {}).get("canary_gbps")
    if not idle:
        return None
    try:
        best = rate()
        if best < CONTENDED * idle:
            best = max(best, rate())
    except torch.cuda.OutOfMemoryError:  # the problem fills the device: no probe, and no claim either way
        return None
    if best >= CONTENDED * idle:
        return None
    return (f"a {CANARY_BYTES >> 20} MiB copy ran at {best:.0f} GB/s, {best / idle:.0%} of the {idle:.0f} GB/s it ran "
            f"at when this GPU's ceilings were measured: another process is using the GPU")


def measured_under_load(ceilings: dict, rate=canary_gbps) -> str | None:
    """Why cached ceilings look measured while another process used the GPU (the canary runs
    faster now than their idle rate by more than contention's margin), or None. A canary that
    cannot run (a device too full for its copy) makes no claim either way."""
    try:
        now = rate()
    except Exception:
        return None
    then = ceilings.get("canary_gbps") or 0.0
    if then >= CONTENDED * now:
        return None
    return (f"the canary copy runs at {now:.0f} GB/s, and ran at {then:.0f} GB/s when this GPU's ceilings were "
            "cached: another process was using the GPU then")


def cpu_threads_warm() -> None:
    """Start torch's intra-op thread pool now, so threads it starts later are not blamed on the kernel."""
    torch.ones(1 << 20).sum()


def warm_triton_compiler(target):
    """Compile a tiny Triton kernel for `target` (no launch). A process's first Triton compile pays
    the compiler's one-time start (its passes and libdevice loaded, ptxas's first run): the RMSNorm
    template's compile for sm_90 took 0.574 s first in a process, 0.170 s after this (CPU machine,
    benchmarks/results/cpu-triton-first-compile). Taken in a process started ahead of its
    evaluation, so a candidate's first call pays only its own kernel's compile."""
    import triton
    import triton.language as tl
    from triton.compiler import ASTSource

    @triton.jit
    def scale(x, y, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + i, tl.load(x + i, mask=i < n) * 2.0, mask=i < n)

    signature = {"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return triton.compile(ASTSource(scale, signature, {"BLOCK": 128}), target=target)
