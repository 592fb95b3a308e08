"""Optional library baselines' availability checks (operators/_baselines.py): a library that is
not installed and one that is installed but cannot load are told apart."""
import sys

from ablate.operators._baselines import missing


def test_a_library_not_installed_is_said_so():
    assert missing("ablate_no_such_library", "no-such-library")() == "no-such-library not installed"
    assert missing("ablate_no_such_library.sub", "no-such-library")() == "no-such-library not installed"


def test_an_installed_library_missing_a_dependency_names_the_dependency(tmp_path, monkeypatch):
    """quack-kernels on the H200 without the CuTe DSL's core package: installed, failing to import."""
    pkg = tmp_path / "ablate_half_installed"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import ablate_absent_dependency.core\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ablate_half_installed", raising=False)
    why = missing("ablate_half_installed", "half-installed")()
    assert why.startswith("half-installed failed to import:") and "ablate_absent_dependency" in why


def test_an_importable_library_is_available():
    assert missing("json", "json")() is None
