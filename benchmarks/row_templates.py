"""Design measurements for the scripted policy's row-wise templates (rmsnorm, layernorm, softmax)
on row widths that are not any operator's eval shapes: a norm's row held whole or looped over in
chunks of several sizes and warps (the norm templates' rules among them: rows wider than LOOP_ABOVE
looped in chunks scaled to the row's width, and RMSNorm's rows up to WHOLE_MAX whose last chunk would
be half empty held whole), and for softmax's wide rows, streaming them in
blocks of several sizes (statistics reduced across the program every block, or kept per thread and
reduced once, with or without the row's head held in registers: the template's width rules) or
holding them whole in registers. (Measured slower and removed: RMSNorm's whole row held in float32,
N known only at run time, 1b535ea, benchmarks/results/h200-lean; a norm's row held in power-of-two
pieces, commit 237a8b7, benchmarks/results/h200-all-ten; a wide softmax row split over programs
that wait for each other, and the streamed second pass taken last block first, e41c3d8,
benchmarks/results/h200-counters; loops software-pipelined by Triton and persistent
programs looping over rows, for all three templates, b8ad3e7, benchmarks/results/h200-chunks; a
streamed softmax row at 32 warps, one program an SM, wherever two an SM would outgrow L2, deb21b5,
benchmarks/results/h200-l2-rows; a wide softmax row's first pass pipelined by Triton, 4d85db1,
benchmarks/results/h200-lanes.)
Each variant is checked against the operator's reference, then timed with triton's do_bench (L2
flushed before each call, median).

    python -m benchmarks.row_templates --out DIR [--ms 100] [--operators rmsnorm layernorm softmax] [--widths N ...]
        [--libraries quack liger ...]

--libraries also times those registered baselines on each shape, the same way, side by side (timed
only: the judge's correctness rule, which can exclude a library, is not applied to them here).

Writes DIR/row_templates.md and DIR/row_templates.json. Needs a CUDA GPU."""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATES = ROOT / "harnesses" / "scripted" / "templates"
NORM = {"num_warps": 4, "rows_per_program": 1, "chunk": 0}
WHOLE = {"LOOP_ABOVE": 1 << 30}  # the width rule off: rows held whole however wide
LITERAL = {"CHUNK_REF": 1 << 30}  # the scaling off: chunks of the configuration's columns however wide the row
LITERAL_RMS = {**LITERAL, "WHOLE_MAX": 0}  # and RMSNorm's rows never held whole instead
# (operator, shape, label, CONFIG, module attributes to set); no shape here is an eval shape
CASES = []
for shape in ({"M": 16384, "N": 8192}, {"M": 8192, "N": 6144}, {"M": 8192, "N": 4608}, {"M": 16384, "N": 3072},
              {"M": 4096, "N": 12288}, {"M": 32768, "N": 1536}, {"M": 16384, "N": 3584}, {"M": 8192, "N": 7680},
              {"M": 4096, "N": 14336}, {"M": 8192, "N": 5632}, {"M": 8192, "N": 6656}):
    for op in ("rmsnorm", "layernorm"):
        CASES.append((op, shape, "the default: whole row, 4 warps; above LOOP_ABOVE chunks scaled to the row", NORM, {}))
        if op == "rmsnorm":
            CASES.append((op, shape, "the default under chunks of 2048 at 8 warps: rows up to WHOLE_MAX whose last "
                          "chunk would be half empty held whole", dict(NORM, num_warps=8, chunk=2048), {}))
        for warps in (4, 8, 16):
            CASES.append((op, shape, f"whole row, {warps} warps, however wide", dict(NORM, num_warps=warps), WHOLE))
        for chunk, warps in ((1024, 2), (1024, 4), (1024, 8), (2048, 4), (2048, 8), (2048, 16), (4096, 4), (4096, 8),
                             (4096, 16)):
            CASES.append((op, shape, f"chunks of {chunk} columns, {warps} warps, the second read from L2",
                          dict(NORM, num_warps=warps, chunk=chunk), LITERAL_RMS if op == "rmsnorm" else LITERAL))
for shape in ({"M": 4096, "N": 65536}, {"M": 1024, "N": 200000}, {"M": 8192, "N": 24576}, {"M": 3072, "N": 151936},
              {"M": 2048, "N": 100000}):
    soft = {"block": 4096, "num_warps": 8, "max_width": 16384}
    CASES.append(("softmax", shape, "the default: up to WIDE_ABOVE streamed as configured, wider rows per-thread "
                  "statistics, a head held where rows outgrow L2", soft, {}))
    for block, warps in ((8192, 8), (16384, 16)):
        CASES.append(("softmax", shape, f"streamed, block {block}, {warps} warps, statistics reduced every block",
                      dict(soft, block=block, num_warps=warps), {"STREAM_BLOCK_MAX": block, "WIDE_ABOVE": 1 << 30}))
    for block in (16384, 32768):
        for held, attrs in (("nothing held", {"HOLD_PER_THREAD": 0}), ("a head held", {"ROWS_AN_SM": 1 << 20})):
            CASES.append(("softmax", shape, f"streamed, block {block}, 32 warps, statistics per thread, {held}", soft,
                          {"WIDE_ABOVE": 0, "WIDE_BLOCK": block, **attrs}))
    if shape["N"] <= 32768:
        for cols in (1024, 512):
            CASES.append(("softmax", shape, f"whole row in registers, WARP_COLS {cols}",
                          {"block": 4096, "num_warps": 4, "max_width": 32768}, {"WARP_COLS": cols, "ONE_BLOCK_MAX": 32768}))
NAMES = sorted({case[0] for case in CASES})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ms", type=float, default=100.0, help="do_bench's repetition time per variant, ms")
    ap.add_argument("--operators", nargs="+", default=NAMES, choices=NAMES, help="measure only these templates' variants")
    ap.add_argument("--widths", nargs="+", type=int, metavar="N", help="measure only the shapes of these row widths")
    ap.add_argument("--libraries", nargs="+", default=[], metavar="NAME",
                    help="also time these baselines of the operator on each shape (a name it lacks is skipped)")
    args = ap.parse_args(argv)
    known = sorted({case[1]["N"] for case in CASES if case[0] in args.operators})
    unknown = sorted(set(args.widths or ()) - set(known))
    if unknown:
        ap.error(f"no variant of {' '.join(args.operators)} has a row width in {unknown}; widths measured: {known}")
    import torch
    import triton
    from triton.testing import do_bench

    from ablate import operators
    from ablate.operators._operator import load_module

    if not torch.cuda.is_available():
        print("error: this benchmark needs a CUDA GPU (it times kernels); run it on a machine with one",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    rows, libs, timed = [], [], set()
    for i, (name, shape, label, cfg, attrs) in enumerate(CASES):
        if name not in args.operators or (args.widths and shape["N"] not in args.widths):
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
        if (name, shape["M"], shape["N"]) not in timed:
            timed.add((name, shape["M"], shape["N"]))
            for lib in args.libraries:
                base = op.baselines.get(lib)
                why = "not a baseline of this operator" if base is None else base.unavailable()
                if why:
                    print(f"{name} {shape['M']}x{shape['N']} {lib}: skipped, {why}", flush=True)
                    continue
                ms_lib = do_bench(lambda: base.fn(*inputs), rep=args.ms, return_mode="median")
                libs.append({"operator": name, "shape": shape, "library": lib, "ms": ms_lib})
                print(f"{name} {shape['M']}x{shape['N']} library {lib}: {ms_lib:.4f} ms", flush=True)
        del inputs
        torch.cuda.empty_cache()
    meta = {"gpu": props.name, "l2_bytes": props.L2_cache_size, "sms": props.multi_processor_count,
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "command": "python -m benchmarks.row_templates " + " ".join(sys.argv[1:] if argv is None else argv)}
    (args.out / "row_templates.json").write_text(json.dumps({"meta": meta, "rows": rows, "libraries": libs}, indent=1))
    lines = [f"# Row-wise template variants on {meta['gpu']}", "",
             f"torch {meta['torch']}, triton {meta['triton']}; L2 {meta['l2_bytes'] >> 20} MiB, {meta['sms']} SMs.",
             f"Command: `{meta['command']}`. Times: do_bench medians, L2 flushed; GB/s: the operator's fewest bytes over the time.",
             "", "## The fastest correct variant per shape", "",
             "| operator | shape | variant | ms | GB/s | the first variant's ms | libraries' ms |", "|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["operator"], r["shape"]["M"], r["shape"]["N"]) for r in rows):
        same = [r for r in rows if (r["operator"], r["shape"]["M"], r["shape"]["N"]) == key]
        good = [r for r in same if r["correct"]]
        lib_ms = ", ".join(f"{r['library']} {r['ms']:.4f}" for r in libs
                           if (r["operator"], r["shape"]["M"], r["shape"]["N"]) == key) or "-"
        if good:
            best = min(good, key=lambda r: r["ms"])
            lines.append(f"| {key[0]} | M={key[1]},N={key[2]} | {best['variant']} | {best['ms']:.4f} | {best['gbps']:.0f} | "
                         f"{same[0]['ms']:.4f} | {lib_ms} |")
    lines += ["", "## Every variant", "", "| operator | shape | variant | correct | ms | GB/s |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['operator']} | M={r['shape']['M']},N={r['shape']['N']} | {r['variant']} | "
                     f"{'yes' if r['correct'] else 'no: ' + r['note']} | {r['ms']:.4f} | {r['gbps']:.0f} |")
    (args.out / "row_templates.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
