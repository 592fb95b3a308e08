"""A benchmark's JSON lines: the command and the machine first, then one line per measurement,
each printed as it comes (long runs show progress) and all written to --out at the end; and
`positive`, the argument type of a count."""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path


def code() -> dict:
    """Which code runs: the checkout's commit, "-dirty" when its tracked files differ from it (a copy
    whose git lags its files then says so rather than naming a commit that did not run), and where
    `ablate` is imported from (an installed package need not be the checkout)."""
    import ablate

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return {"commit": commit, "ablate": str(Path(ablate.__file__).parent)}


class Lines:
    def __init__(self, out: Path | None):
        import torch

        self.out, self.rows = out, []
        self.add({"command": " ".join(sys.argv), **code(), "machine": platform.processor() or platform.machine(),
                  "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                  "torch": torch.__version__})

    def add(self, row: dict) -> None:
        self.rows.append(row)
        print(json.dumps(row), flush=True)

    def write(self) -> None:
        if self.out:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.out.write_text("".join(json.dumps(x) + "\n" for x in self.rows))


def positive(text: str) -> int:
    """An argparse type: a count of at least 1 (else a one-line usage error)."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not a positive count")
    return n
