"""Baselines and ceilings, in the judge: the GPU's speed-of-light ceilings and every library
baseline's time per shape, measured before any submitted code runs and cached (per GPU, driver,
library versions and operator definition). A baseline counts only when its outputs pass the same
correctness rule as the candidate's: the best library of a shape is the fastest that passed."""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from ablate.evaluate import _cache, _correctness, _timing


def ceilings(info: dict, note, measure) -> dict:
    key = f"{info['name']}|{info['driver']}|{info['torch']}|v2"
    found = _cache.get("ceilings", key)
    if found is None:
        note("measuring this GPU's memory bandwidth and matmul rate (once per GPU, then cached)")
        found = measure()
        _cache.put("ceilings", key, found)
    return found


def operator_hash(op, node: dict | None) -> str:
    """Identifies the operator's definition (its folder's code, its task files, how it was
    loaded): part of the baseline cache key, so an edited operator is measured again."""
    import operators

    h = hashlib.sha256(json.dumps(node or {}, sort_keys=True, default=str).encode())
    files = set(Path(p) for p in op.task_files.values())
    if op.name in operators.REGISTRY:
        files |= set(Path(sys.modules[operators.REGISTRY[op.name]].__file__).parent.glob("*.py"))
    for p in sorted(files):
        try:
            h.update(p.name.encode() + p.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:16]


def for_shape(ev, shape: dict) -> dict:
    """{"ms": {name: median}, "skipped": {name: reason}} for one shape."""
    from operators import shape_id

    ms, skipped, todo = {}, {}, []
    for name, b in ev.op.baselines.items():
        if b.needs_cuda and ev.device != "cuda":
            skipped[name] = "needs CUDA"
        elif (why := b.unavailable()) is not None:
            skipped[name] = why
        else:
            todo.append((name, b))
    if not todo:
        return {"ms": ms, "skipped": skipped}
    keys = {name: "|".join([ev.info["name"], str(ev.info["driver"]), json.dumps(ev.libs, sort_keys=True), ev.op.name,
                            ev.op_hash, shape_id(shape), name, ev.mode, "v2"]) for name, _ in todo}
    cached = {name: _cache.get("baselines", keys[name]) for name, _ in todo} if ev.device == "cuda" else {}
    sets = None
    for name, b in todo:
        entry = cached.get(name)
        if entry is None:
            if ev.device == "cuda":  # minutes on a cold cache (torch.compile); cached after
                ev.note(f"{shape_id(shape)}: timing baseline {name} (once per GPU and versions, then cached)")
            if sets is None:  # one draw of each distribution: the timing sources
                sets = [ev.input_set(shape, k) for k in ev.sources(shape)]
            entry = measure(ev, b, sets)
            if ev.device == "cuda":
                _cache.put("baselines", keys[name], entry)
        if entry.get("error"):
            skipped[name] = entry["error"]
        else:
            ms[name] = entry["ms"]
    return {"ms": ms, "skipped": skipped}


def measure(ev, b, sets: list[tuple]) -> dict:
    """A baseline's median time on the timing sources, if its outputs pass the rule on each."""
    import torch

    try:
        est = None
        for ins, refs, exp in sets:
            t0 = time.perf_counter()
            outs = _correctness.as_outputs(b.fn(*ins))
            est = (time.perf_counter() - t0) * 1e3
            fails, _ = _correctness.check(ev.op, outs, refs, ins, exp)
            if fails:
                return {"error": f"excluded, incorrect: {next(iter(fails.values()))}"}
        sources = [ins for ins, _, _ in sets]
        live = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in sources[0])
        result = _timing.measure(b.fn, live, sources, device=ev.device, graph=ev.cfg["cuda_graph"], est_ms=est)
        return {"ms": result["median"]}
    except Exception as e:  # a broken library is reported, not fatal
        return {"error": f"raised {type(e).__name__}: {str(e)[:300]}"}
