"""A benchmark's JSON lines: the command and the machine first, then one line per measurement,
each printed as it comes (long runs show progress) and all written to --out at the end."""
from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path


class Lines:
    def __init__(self, out: Path | None):
        import torch

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        self.out, self.rows = out, []
        self.add({"command": " ".join(sys.argv), "commit": commit, "machine": platform.processor() or platform.machine(),
                  "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                  "torch": torch.__version__})

    def add(self, row: dict) -> None:
        self.rows.append(row)
        print(json.dumps(row), flush=True)

    def write(self) -> None:
        if self.out:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.out.write_text("".join(json.dumps(x) + "\n" for x in self.rows))
