"""`python -m ablate.harnesses.agents install [claude_code] [codex] [--version V]` and `... status`."""
from __future__ import annotations

import argparse
import sys

from ablate.errors import AblateError
from ablate.harnesses.agents import _install


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.harnesses.agents",
                                description=f"The external agent CLIs, pinned, installed into {_install.root()} "
                                            f"(set ABLATE_AGENTS_DIR to move it).")
    sub = p.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="npm-install agents at their pinned versions")
    inst.add_argument("agents", nargs="*", default=[], help=f"which ({', '.join(_install.PINNED)}; default: all)")
    inst.add_argument("--version", help="a version other than the pinned one (one agent only)")
    sub.add_parser("status", help="which agents are installed")
    args = p.parse_args(argv)
    try:
        if args.command == "install":
            names = list(args.agents) or list(_install.PINNED)
            if args.version and len(names) != 1:
                raise AblateError("--version names one agent's version; give exactly one agent")
            for name in names:
                _install.install(name, args.version)
        else:
            for name, pkg in _install.PINNED.items():
                m = _install.installed(name)
                print(f"{name} {pkg.version} ({pkg.npm}): " + (f"installed, {m['reported']}" if m else
                                                             f"not installed (python -m ablate.harnesses.agents install {name})"))
    except AblateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
