# The profiler's driver, run in the agent's sandbox:
#   python -c "$(cat profile.py)" MODE SHAPE_INDEX REPS
# MODE "ncu": warm up kernel.py on one public shape, then run it once between
#   cudaProfilerStart/Stop, so Nsight Compute (--profile-from-start off) sees only the kernel's launches.
# MODE "timed": time kernel.py on every public shape, the reference on the chosen one, and the
#   machine's own ceilings (a device copy of as many bytes; a bf16 matmul on a GPU).
# Prints one line: PROFILE {...}.
import json, statistics, sys, time

import torch

sys.path.insert(0, ".")
from reference import example_inputs, reference  # noqa: E402
from kernel import kernel  # noqa: E402

mode, index, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
device = "cuda" if torch.cuda.is_available() else "cpu"
shapes = json.load(open("shapes.json"))
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)


def inputs_for(shape):
    return example_inputs(**{k: v for k, v in shape.items() if k != "dtype"}, device=device, seed=1)


def nbytes(values):
    values = values if isinstance(values, (tuple, list)) else (values,)
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def median_ms(fn):
    fn()
    sync()
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(reps):
            start.record(); fn(); end.record(); end.synchronize()
            samples.append(start.elapsed_time(end))
        return statistics.median(samples)
    samples = []
    for _ in range(max(3, reps // 5)):
        t = time.perf_counter(); fn(); samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


out = {"mode": mode, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)",
       "shape": shapes[index]}
inputs = inputs_for(shapes[index])
if mode == "ncu":
    for _ in range(3):  # compile and warm up outside the profiled range
        kernel(*inputs)
    sync()
    torch.cuda.profiler.start()
    kernel(*inputs)
    sync()
    torch.cuda.profiler.stop()
else:
    result = kernel(*inputs)
    out["bytes_touched"] = nbytes(inputs) + nbytes(result)
    out["kernel_ms"] = median_ms(lambda: kernel(*inputs))
    out["reference_ms"] = median_ms(lambda: reference(*inputs))
    out["by_shape"] = []
    for i, shape in enumerate(shapes):
        x = inputs if i == index else inputs_for(shape)
        out["by_shape"].append({"shape": shape, "kernel_ms": out["kernel_ms"] if i == index else median_ms(lambda: kernel(*x))})
    n = max(out["bytes_touched"] // 2, 1 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    out["copy_gbs"] = 2 * n / (median_ms(lambda: dst.copy_(src)) * 1e-3) / 1e9  # bytes read + written
    if device == "cuda":
        a = torch.randn(4096, 4096, dtype=torch.bfloat16, device=device)
        out["matmul_tflops"] = 2 * 4096 ** 3 / (median_ms(lambda: a @ a) * 1e-3) / 1e12
print("PROFILE " + json.dumps(out))
