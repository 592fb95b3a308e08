"""What slows the judge's copy of a batch's inputs into the slots, kernel by kernel (a CUDA machine).

    python -m benchmarks.copy_in --shapes smoke --out DIR [--kernels twin pinread ...] [--seed 1]

A shape's first timed batch gives the yardstick: the judge's copy-in a call. A later batch whose
copy-in takes more than 1.5 times that, plus 50 us over the batch, is void (`_batches.batch_verdict`;
another context's work at the start slows it). fused_batch.py's call-by-call twin is an honest
kernel, and on two H100s every batch of one smoke shape was voided so (21 us a call against 5.1;
35-42 against 22.6): rejected, `work_outside_window`. Each kernel here is the honest Triton RMSNorm
(tests/ablate/evaluate/kernels/honest_triton.py) with one piece of the twin added, or the twin:

  honest     as it is
  launches2  its kernel launched twice a call (the twin launches two kernels a call)
  launches8  eight times
  pinread    a one-program kernel first, reading a word of pinned host memory (the twin's first
             kernel reads its table there)
  setitems   four Python writes into pinned host memory a call (the twin writes its table so)
  twin       fused_batch.py with FUSE = False

Each is judged on the shape set against one library (torch_F.rms_norm: the copy-in does not depend
on the libraries, and the others' cold calibration took minutes), the evaluation's progress on
stderr. One JSON line a kernel on stdout, all of them in DIR/copy-in.json:
the verdict and reasons, and per shape the judged time a call, `copy_in_us` (the yardstick, then
the median and the largest of the batches after it, void ones included, and `host_median`, the
judge's host queueing the copies: a copy-in far above it waited on the device), the calls a batch,
the batches voided and the first void lines.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

KERNELS = Path(__file__).resolve().parent.parent / "tests" / "ablate" / "evaluate" / "kernels"
LAUNCH = "    _rmsnorm[(M,)](x, weight, y, N, x.stride(0), 1e-6, BLOCK=triton.next_power_of_2(N))"
PINNED = '''
_pinned: dict = {}


def _pinned_word(x):
    """A word of host memory (pinned on a GPU) and one of the device's, from a ring no batch wraps."""
    if not _pinned:
        _pinned["host"] = torch.zeros(2048, 4, dtype=torch.int64, pin_memory=x.is_cuda)
        _pinned["dev"] = torch.zeros(2048, 4, dtype=torch.int64, device=x.device)
        _pinned["k"] = 0
    k = _pinned["k"] = (_pinned["k"] + 1) % 2048
    return _pinned["host"][k], _pinned["dev"][k]


@triton.jit
def _peek(host_addr, dev_ptr):
    tl.store(dev_ptr, tl.load(host_addr.to(tl.pointer_type(tl.int64))))

'''
NAMES = ("honest", "launches2", "launches8", "pinread", "setitems", "twin")


def variants() -> dict[str, str]:
    """Each kernel's source, by name (NAMES). Exits with one line when a source lacks what is edited."""
    honest = (KERNELS / "honest_triton.py").read_text()
    twin = (KERNELS / "fused_batch.py").read_text()
    for path, text, needle in ((KERNELS / "honest_triton.py", honest, LAUNCH),
                               (KERNELS / "honest_triton.py", honest, "\n\ndef kernel("),
                               (KERNELS / "fused_batch.py", twin, "\nFUSE = True\n")):
        if needle not in text:
            raise SystemExit(f"{path} no longer has {needle.strip()!r}: edit benchmarks/copy_in.py to match it")
    with_pinned = honest.replace("\n\ndef kernel(", "\n" + PINNED + "\ndef kernel(")
    return {
        "honest": honest,
        "launches2": honest.replace(LAUNCH, "    for _ in range(2):\n    " + LAUNCH),
        "launches8": honest.replace(LAUNCH, "    for _ in range(8):\n    " + LAUNCH),
        "pinread": with_pinned.replace(LAUNCH, "    host, dev = _pinned_word(x)\n"
                                               "    _peek[(1,)](host.data_ptr(), dev)\n" + LAUNCH),
        "setitems": with_pinned.replace(LAUNCH, "    host, _ = _pinned_word(x)\n"
                                                "    host[0], host[1], host[2], host[3] = 1, x.data_ptr(), weight.data_ptr(), y.data_ptr()\n"
                                                + LAUNCH),
        "twin": twin.replace("\nFUSE = True\n", "\nFUSE = False\n"),
    }


def row(name: str, result: dict, seconds: float) -> dict:
    """A kernel's line: its verdict and, per shape, what its timing saw of the copy-in."""
    shapes = []
    for s in result.get("shapes") or []:
        t = s.get("time_ms") or {}
        shapes.append({"shape": s.get("shape_id"), "time_ms": t.get("median"), "copy_in_us": t.get("copy_in_us"),
                       "calls_per_batch": t.get("calls_per_batch"),
                       "libraries": sorted(s.get("baselines_ms") or {}), "batches": t.get("batches"),
                       "voided": t.get("voided"), "voided_batches": (s.get("voided_batches") or [])[:3],
                       "error": (s.get("error") or "")[:600] or None})
    return {"kernel": name, "verdict": result.get("verdict"), "reasons": result.get("reasons"),
            "seconds": round(seconds, 1), "shapes": shapes}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="smoke", help="the shape set (smoke: where the twin was voided)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--kernels", nargs="+", default=list(NAMES), choices=NAMES)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--library", default="torch_F.rms_norm", help="the one library each shape is timed against")
    a = p.parse_args(argv)
    sources = variants()
    a.out.mkdir(parents=True, exist_ok=True)
    from ablate.errors import AblateError

    import torch

    res = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
           "command": " ".join(["python -m benchmarks.copy_in", *(argv if argv is not None else sys.argv[1:])]),
           "rows": []}
    with mock.patch.dict(os.environ, {"ABLATE_EVAL_BASELINES": a.library}):  # restored after: tests call main()
        try:
            judge_all(a, sources, res)
        except AblateError as e:
            raise SystemExit(f"copy_in: {e}") from None
    return 0


def judge_all(a, sources: dict, res: dict) -> None:
    """main()'s loop: each kernel judged, its line printed and the file rewritten as it comes."""
    from ablate.evaluate import evaluate

    with tempfile.TemporaryDirectory() as d:
        for name in a.kernels:
            path = Path(d) / name / "kernel.py"
            path.parent.mkdir()
            path.write_text(sources[name])
            t0 = time.perf_counter()

            def say(line: str, name=name, t0=t0) -> None:
                print(f"[{time.perf_counter() - t0:7.1f} s] {name}: {line}", file=sys.stderr, flush=True)

            say("judging")
            got = row(name, evaluate("rmsnorm", path, shapes=a.shapes, seed=a.seed, progress=say), time.perf_counter() - t0)
            res["rows"].append(got)
            print(json.dumps(got), flush=True)
            (a.out / "copy-in.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    sys.exit(main())
