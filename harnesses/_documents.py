"""The prompts, wiki pages and sandbox scripts a harness shows the agent: files, read by name.

Every trial records the SHA-256 of each file its harness used (``Harness.describe()["hashes"]``),
so a result names the exact text behind it. Paths are relative to the ``harnesses/`` folder.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# What every arm shows: the goal-only system prompt and the task statement. Equal in every arm of
# a match, so their hashes belong to the match key; a mechanism's own files belong to its arm.
CORE = ("prompts/core.md", "prompts/task.md")


@functools.cache
def text(rel: str) -> str:
    return (ROOT / rel).read_text()


def paths(patterns: tuple[str, ...]) -> list[str]:
    """The files the patterns name (globs relative to harnesses/), sorted, each once."""
    found: set[str] = set()
    for pattern in patterns:
        matches = sorted(ROOT.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"harnesses/{pattern}: no such document")
        found |= {p.relative_to(ROOT).as_posix() for p in matches if p.is_file()}
    return sorted(found)


@functools.cache
def sha256(rel: str) -> str:
    return hashlib.sha256((ROOT / rel).read_bytes()).hexdigest()


def hashes(patterns: tuple[str, ...]) -> dict[str, str]:
    return {rel: sha256(rel) for rel in paths(patterns)}


def core_hashes() -> dict[str, str]:
    return hashes(CORE)
