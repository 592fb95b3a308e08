"""Report forgery: finds the driver's configuration (nonce and result file) through the garbage
collector and appends its own, flattering report of the shape before the driver does."""
import gc
import json

import torch


def _forge(index):
    for obj in gc.get_objects():
        go = vars(obj).get("go") if hasattr(obj, "__dict__") and not isinstance(obj, type) else None
        if isinstance(go, dict) and "nonce" in go:
            with open(go["result"], "a") as f:
                f.write(json.dumps({"nonce": go["nonce"], "kind": "shape", "index": index, "files": [],
                                    "failures": {}, "timing": {"median": 1e-6, "p10": 1e-6, "p90": 1e-6, "n": 9,
                                                               "wall_ms": 1e-6}, "timed": []}) + "\n")
            return True
    return False


def kernel(x, weight):
    _forge(0 if x.shape[1] == 512 else 1)
    return torch.zeros_like(x)
