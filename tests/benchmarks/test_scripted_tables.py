"""benchmarks/scripted.py's tables say which libraries each operator's ratios leave out, and an
installed library that did not load is loud: on the H200 a quack that failed to import raised
cross-entropy's geomean from 1.34x to 1.99x under a header that read "quack-kernels 0.6.5"."""
import importlib.metadata

from benchmarks import scripted


def _op(not_timed):
    return {"verdict": "accepted", "reasons": [], "kind": "memory-bound", "aim": 0.95, "geomean_ratio": 2.0,
            "worst_ratio": 1.7, "met": True, "config": {}, "shape_configs": {}, "trial_s": 1, "evaluation_s": 1,
            "libraries_not_timed": not_timed}


def test_a_library_that_failed_to_import_is_named_before_the_rest():
    ops = {"cross_entropy": _op({"quack": "quack-kernels failed to import: No module named 'cutlass.cutlass_dsl'",
                                 "liger": "needs CUDA"}),
           "rope": _op({})}
    md = scripted.markdown([], ops, {})
    section = md.split("## Libraries not timed", 1)[1]
    loud = section.index("**Installed but not loaded: cross_entropy's ratios are against the other libraries only.**")
    assert loud < section.index("- cross_entropy: quack (quack-kernels failed to import")
    assert "liger (needs CUDA)" in section and "rope" not in section


def test_when_every_library_was_timed_the_table_says_so():
    md = scripted.markdown([], {"rope": _op({})}, {})
    assert "- none: every operator's libraries were timed" in md and "Installed but not loaded" not in md


def test_the_versions_line_says_when_an_installed_library_does_not_load(monkeypatch):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.6.5" if name == "quack-kernels" else real(name))
    line = scripted.versions()
    assert "quack-kernels 0.6.5 (FAILS TO IMPORT: quack-kernels " in line
