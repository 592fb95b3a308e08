# The harness's own measurement of one kernel file, run in the agent's sandbox:
#   python -c "$(cat measure.py)" KERNEL_PATH REPS
# Correctness against .harness/reference.py on every shape of .harness/shapes.json (the task's own
# copies, which the harness rewrites before each run), two seeds, then a median time. Where the
# reference defines accepts(got, want, *inputs) (an operator with more than one right answer, such
# as top-k's tied indices), that decides; otherwise outputs are compared within the dtype's tolerance.
# Prints one line: MEASURE {"shapes": [...], "correct": bool, "ms": geomean or null}.
import importlib.util, json, math, statistics, sys, time, traceback

import torch

sys.path[:0] = [".harness", "."]
import reference as _task  # noqa: E402
from reference import example_inputs, reference  # noqa: E402

accepts = getattr(_task, "accepts", None)

TOL = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3), torch.float32: (1e-4, 1e-4)}


def load(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.kernel


def close(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    if len(got) != len(want):
        return False, float("inf")
    ok, worst = True, 0.0
    for g, w in zip(got, want):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype != w.dtype:
            return False, float("inf")
        if not w.is_floating_point():
            ok = ok and bool(torch.equal(g, w))
            continue
        atol, rtol = TOL.get(w.dtype, (1e-4, 1e-4))
        diff = (g.float() - w.float()).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        ok = ok and bool(torch.isfinite(g.float()).all()) and bool(torch.allclose(g.float(), w.float(), atol=atol, rtol=rtol))
    return ok, worst


def timed(fn, reps, device):
    if device == "cuda":
        from triton.testing import do_bench
        return do_bench(fn, return_mode="median")
    fn()
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def main(path, reps):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)", "shapes": []}
    try:
        kernel = load(path)
    except Exception:
        out.update(correct=False, ms=None, error="import failed: " + traceback.format_exc(limit=3)[-800:])
        return out
    for shape in json.load(open(".harness/shapes.json")):
        dims = {k: v for k, v in shape.items() if k != "dtype"}
        row = {"shape": shape, "correct": False, "max_err": None, "ms": None, "error": None}
        try:
            ok, worst = True, 0.0
            for seed in (1, 2):
                inputs = example_inputs(**dims, device=device, seed=seed)
                got, want = kernel(*inputs), reference(*inputs)
                good, err = (bool(accepts(got, want, *inputs)), 0.0) if accepts else close(got, want)
                ok, worst = ok and good, max(worst, err)
            row.update(correct=ok, max_err=worst)
            if ok:
                row["ms"] = timed(lambda: kernel(*inputs), reps, device)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:500]
        out["shapes"].append(row)
    out["correct"] = bool(out["shapes"]) and all(r["correct"] for r in out["shapes"])
    times = [r["ms"] for r in out["shapes"]]
    out["ms"] = math.exp(sum(math.log(t) for t in times) / len(times)) if out["correct"] and all(times) else None
    return out


print("MEASURE " + json.dumps(main(sys.argv[1], int(sys.argv[2]))))
