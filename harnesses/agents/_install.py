"""The published agent CLIs, at pinned versions, installed from npm into a folder of ablate's own.

    python -m ablate.harnesses.agents install            # both, at the pinned versions
    python -m ablate.harnesses.agents install claude_code --version 2.1.332
    python -m ablate.harnesses.agents status

Where: $ABLATE_AGENTS_DIR, else ~/.cache/ablate/agents; one folder per agent and version
(``claude_code-2.1.332/``), written whole or not at all. Both packages ship a native binary per
platform as an optional dependency (Claude Code: glibc or musl, dynamically linked; Codex: a static
musl build), so npm installs only the binary for this machine, with ``--ignore-scripts`` (nothing
from the package runs at install time) and nothing needs Node at run time. Each install writes a
manifest: the package, its version, the binary, its sha256 and what ``--version`` printed; the
trial records it.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.errors import AblateError

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Package:
    npm: str  # the npm package
    version: str  # the pinned version
    binaries: dict[str, tuple[str, str]]  # platform -> (the platform package's folder, the binary inside)
    home: str  # the folder bound into the sandbox, relative to the platform package's folder


PINNED = {
    "claude_code": Package("@anthropic-ai/claude-code", "2.1.332", {
        "linux-x64": ("@anthropic-ai/claude-code-linux-x64", "claude"),
        "linux-x64-musl": ("@anthropic-ai/claude-code-linux-x64-musl", "claude"),
        "linux-arm64": ("@anthropic-ai/claude-code-linux-arm64", "claude"),
        "linux-arm64-musl": ("@anthropic-ai/claude-code-linux-arm64-musl", "claude")}, "."),
    "codex": Package("@openai/codex", "0.171.0", {
        "linux-x64": ("@openai/codex-linux-x64", "vendor/x86_64-unknown-linux-musl/bin/codex"),
        "linux-x64-musl": ("@openai/codex-linux-x64", "vendor/x86_64-unknown-linux-musl/bin/codex"),
        "linux-arm64": ("@openai/codex-linux-arm64", "vendor/aarch64-unknown-linux-musl/bin/codex"),
        "linux-arm64-musl": ("@openai/codex-linux-arm64", "vendor/aarch64-unknown-linux-musl/bin/codex")},
        "vendor/{triple}"),
}


def root() -> Path:
    return Path(os.environ.get("ABLATE_AGENTS_DIR") or Path.home() / ".cache" / "ablate" / "agents").expanduser()


def this_platform() -> str:
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    if platform.system() != "Linux" or machine is None:
        raise AblateError(f"external agents run in ablate's Linux sandbox; this is {platform.system()} "
                          f"{platform.machine()}")
    libc = platform.libc_ver()[0]
    return f"linux-{machine}" + ("" if libc == "glibc" else "-musl")


def folder(name: str, version: str) -> Path:
    return root() / f"{name}-{version}"


def installed(name: str, version: str | None = None) -> dict[str, Any] | None:
    """The manifest of an installed agent, or None."""
    version = version or PINNED[name].version
    try:
        manifest = json.loads((folder(name, version) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if Path(manifest.get("binary", "")).is_file() else None


def require(name: str, version: str | None = None) -> dict[str, Any]:
    """The installed agent's manifest, or AblateError with the command that installs it."""
    version = version or PINNED[name].version
    found = installed(name, version)
    if found is None:
        pinned = "" if version == PINNED[name].version else f" --version {version}"
        raise AblateError(f"agent {name} {version} is not installed in {root()}; install it with "
                          f"`python -m ablate.harnesses.agents install {name}{pinned}` (needs npm and the npm registry)")
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def install(name: str, version: str | None = None, log=print) -> dict[str, Any]:
    """npm-install one agent at a version (the pinned one by default); returns its manifest."""
    if name not in PINNED:
        raise AblateError(f"unknown agent {name!r}; installable: {', '.join(PINNED)}")
    pkg = PINNED[name]
    version = version or pkg.version
    if (found := installed(name, version)) is not None:
        log(f"{name} {version}: already installed in {folder(name, version)}")
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise AblateError("npm is not on PATH; install Node.js and npm (e.g. apt-get install nodejs npm) first")
    plat = this_platform()
    target = folder(name, version)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"{name} {version}: npm install {pkg.npm}@{version} into {target}")
    r = subprocess.run([npm, "install", "--prefix", str(partial), "--no-audit", "--no-fund", "--ignore-scripts",
                        "--no-save", "--loglevel", "error", f"{pkg.npm}@{version}"],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise AblateError(f"npm install {pkg.npm}@{version} failed (exit {r.returncode}): "
                          f"{(r.stderr or r.stdout).strip().splitlines()[-1:] or ['no output']}")
    sub, rel = pkg.binaries[plat]
    binary = partial / "node_modules" / sub / rel
    if not binary.is_file():
        raise AblateError(f"{pkg.npm}@{version} has no binary for {plat} at node_modules/{sub}/{rel}")
    binary.chmod(0o755)
    probe = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
    reported = (probe.stdout or probe.stderr).strip()
    if probe.returncode != 0 or version not in reported:
        raise AblateError(f"{binary} --version gave {reported[:200]!r} (exit {probe.returncode}), not {version}")
    triple = Path(rel).parts[1] if rel.startswith("vendor/") else ""
    home = (partial / "node_modules" / sub / pkg.home.format(triple=triple)).resolve()
    final_home = target / home.relative_to(partial.resolve())
    manifest = {"agent": name, "package": pkg.npm, "version": version, "platform": plat, "reported": reported,
                "binary": str(final_home / binary.resolve().relative_to(home)), "home": str(final_home),
                "sha256": _sha256(binary)}
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(target, ignore_errors=True)
    os.rename(partial, target)
    log(f"{name} {version}: {reported} ({manifest['binary']})")
    return manifest
