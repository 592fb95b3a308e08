"""Knowledge base: the kernel wiki (harnesses/knowledge/*.md) copied into the workspace."""
from __future__ import annotations

from pathlib import Path

from harnesses.mechanisms._base import Mechanism

WIKI = Path(__file__).resolve().parent.parent / "knowledge"


class Knowledge(Mechanism):
    name = "knowledge"

    def files(self, task):
        return {f"wiki/{p.name}": p.read_bytes() for p in sorted(WIKI.glob("*.md"))}

    def system(self, task):
        return ("A kernel-optimisation wiki is in wiki/ (start at wiki/README.md). Read the pages relevant "
                "to the operator before you design the kernel, and follow their checklists.")
