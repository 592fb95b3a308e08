"""Design measurements for the scripted policy's row-wise templates (rmsnorm, layernorm, softmax)
on row widths that are not any operator's eval shapes: a norm's row held whole or looped over in
chunks; softmax's wide rows streamed in blocks of several sizes; and for both, loops software-
pipelined by Triton (`stages` > 1: the next tiles' loads issued, through shared memory, while the
current one is reduced) and persistent programs (`persistent` programs an SM, each looping over
rows, so that fewer rows are in flight and, pipelined, the next row's load overlaps this one's
work). (A norm's row held in power-of-two pieces rather than one padded block was measured slower
at commit 237a8b7 and removed: benchmarks/results/h200-all-ten; so were a wide softmax row split
over programs that wait for each other, and the streamed second pass taken last block first, at
e41c3d8: benchmarks/results/h200-counters.)
Each variant is checked against the operator's reference, then timed with triton's do_bench (L2
flushed before each call, median).

    python -m benchmarks.row_templates --out DIR [--ms 100] [--operators rmsnorm layernorm softmax]

Writes DIR/row_templates.md and DIR/row_templates.json. Needs a CUDA GPU."""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATES = ROOT / "ablate" / "models" / "scripted_templates"
NORM = {"num_warps": 4, "rows_per_program": 1, "chunk": 0, "stages": 1, "persistent": 0}
SOFTMAX = {"block": 4096, "num_warps": 4, "max_width": 16384, "stages": 1, "persistent": 0}


def _persistence(cfg: dict) -> str:
    return f"{cfg['persistent']} programs an SM, looping over rows" if cfg["persistent"] else "a program per row"


# (operator, shape, label, CONFIG, module attributes to set); no shape here is an eval shape
CASES = []
for shape in ({"M": 16384, "N": 8192}, {"M": 8192, "N": 6144}, {"M": 8192, "N": 4608}):
    for op in ("rmsnorm", "layernorm"):
        for warps, stages, persistent in ((4, 1, 0), (8, 1, 0), (8, 2, 2), (16, 2, 2), (16, 2, 1), (16, 3, 1)):
            cfg = dict(NORM, num_warps=warps, stages=stages, persistent=persistent)
            CASES.append((op, shape, f"whole row, {warps} warps, {stages} stages, {_persistence(cfg)}", cfg, {}))
        for chunk, warps in ((1024, 4), (1024, 8), (2048, 4), (2048, 8)):
            for stages in (1, 2, 3):
                CASES.append((op, shape, f"chunks of {chunk} columns, {warps} warps, {stages} stages, the second read from L2",
                              dict(NORM, num_warps=warps, chunk=chunk, stages=stages), {}))
for shape in ({"M": 4096, "N": 65536}, {"M": 1024, "N": 200000}, {"M": 8192, "N": 24576}):
    for block, warps in ((4096, 4), (8192, 8), (16384, 16)):
        for stages in (1, 3):
            for persistent in (0, 1, 2):
                if block == 4096 and persistent == 1:
                    continue
                cfg = dict(SOFTMAX, block=block, num_warps=warps, stages=stages, persistent=persistent)
                CASES.append(("softmax", shape, f"streamed, block {block}, {warps} warps, {stages} stages, {_persistence(cfg)}",
                              cfg, {"STREAM_BLOCK_MAX": block}))
for warps, stages, persistent in ((16, 1, 0), (32, 1, 0), (16, 2, 1), (16, 2, 2), (32, 2, 1)):
    cfg = dict(SOFTMAX, num_warps=warps, stages=stages, persistent=persistent)
    CASES.append(("softmax", {"M": 8192, "N": 12288}, f"whole row, {warps} warps, {stages} stages, {_persistence(cfg)}",
                  cfg, {}))
NAMES = sorted({case[0] for case in CASES})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ms", type=float, default=100.0, help="do_bench's repetition time per variant, ms")
    ap.add_argument("--operators", nargs="+", default=NAMES, choices=NAMES, help="measure only these templates' variants")
    args = ap.parse_args(argv)
    import torch
    import triton
    from triton.testing import do_bench

    import operators
    from operators._operator import load_module

    if not torch.cuda.is_available():
        print("error: this benchmark needs a CUDA GPU (it times kernels); run it on a machine with one",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    rows = []
    for i, (name, shape, label, cfg, attrs) in enumerate(CASES):
        if name not in args.operators:
            continue
        op = operators.get(name)
        shape = {**shape, "dtype": "bfloat16"}
        mod = load_module(TEMPLATES / f"{name}.py", f"row_templates_{name}_{i}")
        mod.CONFIG = cfg
        for k, v in attrs.items():
            setattr(mod, k, v)
        inputs = op.make_inputs(shape, 0, "cuda", "normal")
        try:
            ok = op.verify(mod.kernel(*inputs), inputs)
            correct, note = bool(ok.ok), "" if ok.ok else ok.message
            ms = do_bench(lambda: mod.kernel(*inputs), rep=args.ms, return_mode="median")
        except Exception as e:  # noqa: BLE001 - a variant that does not compile or launch is a finding, not the end
            correct, note, ms = False, f"{type(e).__name__}: {str(e).strip()[:200]}", float("nan")
        gbps = op.bytes(shape) / ms / 1e6
        rows.append({"operator": name, "shape": shape, "variant": label, "config": cfg, "correct": correct,
                     "ms": ms, "gbps": gbps, "note": note})
        print(f"{name} {shape['M']}x{shape['N']} {label}: {'ok' if correct else 'WRONG ' + note} "
              f"{ms:.4f} ms {gbps:.0f} GB/s", flush=True)
        del inputs
        torch.cuda.empty_cache()
    meta = {"gpu": props.name, "l2_bytes": props.L2_cache_size, "sms": props.multi_processor_count,
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "command": "python -m benchmarks.row_templates " + " ".join(sys.argv[1:] if argv is None else argv)}
    (args.out / "row_templates.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# Row-wise template variants on {meta['gpu']}", "",
             f"torch {meta['torch']}, triton {meta['triton']}; L2 {meta['l2_bytes'] >> 20} MiB, {meta['sms']} SMs.",
             f"Command: `{meta['command']}`. Times: do_bench medians, L2 flushed; GB/s: the operator's fewest bytes over the time.",
             "", "## The fastest correct variant per shape", "",
             "| operator | shape | variant | ms | GB/s | the first variant's ms |", "|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["operator"], r["shape"]["M"], r["shape"]["N"]) for r in rows):
        same = [r for r in rows if (r["operator"], r["shape"]["M"], r["shape"]["N"]) == key]
        good = [r for r in same if r["correct"]]
        if good:
            best = min(good, key=lambda r: r["ms"])
            lines.append(f"| {key[0]} | M={key[1]},N={key[2]} | {best['variant']} | {best['ms']:.4f} | {best['gbps']:.0f} | "
                         f"{same[0]['ms']:.4f} |")
    lines += ["", "## Every variant", "", "| operator | shape | variant | correct | ms | GB/s |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['operator']} | M={r['shape']['M']},N={r['shape']['N']} | {r['variant']} | "
                     f"{'yes' if r['correct'] else 'no: ' + r['note']} | {r['ms']:.4f} | {r['gbps']:.0f} |")
    (args.out / "row_templates.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
