"""Probe: what a kineto profile with CUDA activity records in this torch (kernel names, graph replays,
other threads, innermost op), and what it costs a queued batch."""
import threading, time, statistics, sys
import torch
import torch.nn.functional as F
from torch._C._profiler import _ExperimentalConfig

C = torch._C._autograd
prof = torch.autograd.profiler.profile(use_cpu=True, use_device="cuda", use_kineto=True,
                                       experimental_config=_ExperimentalConfig(profile_all_threads=True))
cfg = prof.config(create_trace_id=False)
acts = prof.kineto_activities
print("activities", acts)
prof_cpu = torch.autograd.profiler.profile(use_cpu=True, use_kineto=True,
                                           experimental_config=_ExperimentalConfig(profile_all_threads=True))
cfg_cpu, acts_cpu = prof_cpu.config(create_trace_id=False), prof_cpu.kineto_activities

def record(fn, cuda=True, sync=True):
    c, a = (cfg, acts) if cuda else (cfg_cpu, acts_cpu)
    t0 = time.perf_counter()
    C._prepare_profiler(c, a); C._enable_profiler(c, a)
    t1 = time.perf_counter()
    fn()
    if sync: torch.cuda.synchronize()
    t2 = time.perf_counter()
    res = C._disable_profiler()
    t3 = time.perf_counter()
    ev = list(res.events())
    t4 = time.perf_counter()
    return ev, (t1 - t0, t3 - t2, t4 - t3)

def show(title, ev):
    dev = [e for e in ev if e.device_type() == torch.autograd.DeviceType.CUDA]
    print(f"--- {title}: {len(ev)} events, {len(dev)} device")
    for e in dev[:12]:
        print("   DEV", e.name()[:160], "corr", e.correlation_id(), "linked", e.linked_correlation_id())
    cpu = [e for e in ev if e.device_type() != torch.autograd.DeviceType.CUDA]
    for e in cpu[:25]:
        print("   CPU", e.name()[:80], "corr", e.correlation_id(), "linked", e.linked_correlation_id(),
              "tid", e.start_thread_id(), e.start_ns(), e.duration_ns())

def innermost(ev):
    """kernel name -> innermost ATen op enclosing its launch."""
    cpu = [e for e in ev if e.device_type() != torch.autograd.DeviceType.CUDA]
    runtime = {e.correlation_id(): e for e in cpu if e.name().startswith(("cuda", "cu"))}
    out = []
    for k in (e for e in ev if e.device_type() == torch.autograd.DeviceType.CUDA):
        r = runtime.get(k.linked_correlation_id()) or runtime.get(k.correlation_id())
        op = None
        if r is not None:
            best = None
            for e in cpu:
                if e is r or e.name().startswith(("cuda", "cu")) or e.start_thread_id() != r.start_thread_id():
                    continue
                if e.start_ns() <= r.start_ns() and r.start_ns() + r.duration_ns() <= e.start_ns() + e.duration_ns():
                    if best is None or e.start_ns() >= best.start_ns():
                        best = e
            op = best.name() if best else None
        lk = {e.correlation_id(): e.name() for e in cpu}.get(k.linked_correlation_id())
        out.append((k.name()[:120], r.name() if r else None, op, "linked->", lk))
    return out

dev = "cuda"
x = torch.randn(16384, 4096, device=dev, dtype=torch.bfloat16); w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16); b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
calls = {
    "rms_norm": lambda: F.rms_norm(x, (4096,), w, 1e-6),
    "softmax": lambda: torch.softmax(x, -1),
    "matmul": lambda: a @ b.t(),
    "layer_norm": lambda: F.layer_norm(x, (4096,)),
    "copy+float": lambda: (x.float() * 2).sum(-1),
}
try:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    calls["liger"] = lambda: LigerRMSNormFunction.apply(x, w, 1e-6)
except Exception as e:
    print("no liger", e)
for n, f in calls.items():
    f(); torch.cuda.synchronize()
record(lambda: None)  # first start
for n, f in calls.items():
    ev, t = record(f)
    print(f"=== {n}: setup/disable/events s = {[round(v, 4) for v in t]}")
    for row in innermost(ev):
        print("    ", row)

# graph captured outside the profile, replayed inside
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    for _ in range(2): a @ b.t()
torch.cuda.synchronize()
with torch.cuda.graph(g):
    out = a @ b.t()
ev, t = record(lambda: g.replay())
print("=== graph replay of matmul:", [r for r in innermost(ev)])

# another thread launching while profile runs
def th():
    time.sleep(0.01); torch.softmax(x, -1); torch.cuda.synchronize()
def two():
    T = threading.Thread(target=th); T.start(); T.join()
ev, t = record(two)
print("=== other thread softmax:", innermost(ev))

# profile ends before device runs (queued behind a sleep): what is recorded?
def queued():
    torch.cuda._sleep(200_000_000)
    a @ b.t()
ev, t = record(queued, sync=False)
print("=== disabled before the device ran:", innermost(ev))
torch.cuda.synchronize()

# cupy matmul if present
try:
    import cupy as cp
    ca = cp.asarray(a); cb = cp.asarray(b)
    (ca @ cb.T); cp.cuda.runtime.deviceSynchronize()
    ev, t = record(lambda: (ca @ cb.T, cp.cuda.runtime.deviceSynchronize()))
    print("=== cupy matmul:", innermost(ev))
except Exception as e:
    print("no cupy", e)

# cost on a queued batch of short kernels: profile on vs off
xs = torch.randn(1024, 2048, device=dev, dtype=torch.bfloat16); ws = torch.randn(2048, device=dev, dtype=torch.bfloat16)
def batch(n=400):
    outs = [None] * n
    torch.cuda._sleep(100_000_000)
    s0 = torch.cuda.Event(enable_timing=True); s1 = torch.cuda.Event(enable_timing=True)
    s0.record()
    for i in range(n):
        outs[i] = F.rms_norm(xs, (2048,), ws, 1e-6)
    s1.record()
    return s0, s1
res = {"off": [], "cpu": [], "cuda": []}
for rep in range(8):
    for mode in ("off", "cpu", "cuda"):
        if mode == "off":
            s0, s1 = batch(); torch.cuda.synchronize(); t = (0, 0, 0)
        else:
            holder = {}
            ev, t = record(lambda: holder.update(e=batch()), cuda=(mode == "cuda"))
            s0, s1 = holder["e"]
        res[mode].append((s0.elapsed_time(s1) / 400 * 1e3, t))
for mode, v in res.items():
    us = [a for a, _ in v]
    print(f"cost {mode}: per call us median {statistics.median(us):.3f} min {min(us):.3f} max {max(us):.3f}; disable s {statistics.median([t[1] for _, t in v]):.4f} events s {statistics.median([t[2] for _, t in v]):.4f} setup s {statistics.median([t[0] for _, t in v]):.4f}")
