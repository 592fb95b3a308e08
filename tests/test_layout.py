"""The layout docs/design.md states, checked from the code's own imports: imports point down the
layers (a lazy import inside a function counts the same), and no module passes 500 lines."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("ablate", "operators", "harnesses", "ablations", "analysis", "hydra_plugins")
# Bottom to top, as docs/design.md names them; a module is on the floor of its longest prefix here.
LAYERS = [
    ("ablate.operators", "ablate.errors", "ablate._numbers", "ablate.progress"),
    ("ablate.models", "ablate.sandbox", "ablate.evaluate", "ablate.record", "ablate.store", "ablate._store_index",
     "ablate.snapshots"),
    ("ablate.harnesses", "ablate.gateway"),
    ("ablate.ablations",),
    ("ablate.analysis",),
    ("ablate", "hydra_plugins"),  # the runner, the trial, the config, the CLI
]


def floor(module: str) -> int:
    best, level = -1, len(LAYERS) - 1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), i
    return level


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in ("operators", "harnesses", "ablations", "analysis"):
        parts.insert(0, "ablate")  # pyproject's package mapping
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> list[Path]:
    return [f for d in FOLDERS for f in (ROOT / d).rglob("*.py") if "templates" not in f.parts]


def upward_imports(path: Path, source: str) -> list[str]:
    me = module_name(path)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from ablate import harnesses` imports ablate.harnesses; `from ablate.errors import X`, ablate.errors
            targets = [f"{node.module}.{a.name}" if node.module == "ablate" else node.module for a in node.names]
        else:
            continue
        found += [t for t in targets if t.startswith(("ablate.", "hydra_plugins")) and floor(t) > floor(me)]
    return [f"{me} imports {t}" for t in found]


def test_imports_point_down_the_layers():
    ups = [line for f in sources() for line in upward_imports(f, f.read_text())]
    assert not ups, "\n".join(ups)


def test_an_import_from_a_lower_layer_to_a_higher_one_is_found():
    store = ROOT / "ablate" / "store.py"
    assert upward_imports(store, "def f():\n    from ablate.runner import run_study\n") == [
        "ablate.store imports ablate.runner"]
    assert upward_imports(store, "from ablate import analysis\n") == ["ablate.store imports ablate.analysis"]
    assert upward_imports(store, "from ablate.errors import AblateError\n") == []


def test_no_module_passes_500_lines():
    long = {str(f.relative_to(ROOT)): n for f in sources() if (n := len(f.read_text().splitlines())) > 500}
    assert not long, long


def test_every_config_file_is_package_data_so_an_installed_cli_finds_it():
    """`python -m ablate` reads its configs as the package `ablate.conf` (pkg://), so a file under
    conf/ that no package-data pattern matches is missing from a wheel: the CLI then fails wherever
    the package is installed but in a checkout."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setup["package-dir"]["ablate.conf"] == "conf" and "ablate.conf" in setup["packages"]
    conf = ROOT / "conf"
    shipped = {f for g in setup["package-data"]["ablate.conf"] + setup["package-data"].get("*", []) for f in conf.glob(g)}
    missing = [p.relative_to(conf) for p in conf.rglob("*") if p.is_file() and p.suffix != ".py"
               and "__pycache__" not in p.parts and p not in shipped]
    assert not missing, f"not package data, so not installed: {missing}"
    assert 'config_path="pkg://ablate.conf"' in (ROOT / "ablate" / "__main__.py").read_text()
