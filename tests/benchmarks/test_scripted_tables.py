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


def _results(path, ops, command, device="NVIDIA H200"):
    shapes = [{"operator": n, "shape": "M=1,N=1", "correct": True, "ms": 1.0, "best_library": "torch",
               "library_ms": 1.0, "ratio": 1.0, "sol_fraction": None, "floor_ms": None, "dispatched": False} for n in ops]
    meta = {"command": command, "seconds": 1, "device": {"name": device}}
    path.write_text(scripted.json.dumps({"meta": meta, "operators": ops, "shapes": shapes}))
    return path


def test_a_merge_names_each_operators_file_and_the_results_it_left_out(tmp_path, capsys):
    """Merging runs that both measured an operator keeps the first file's: a stale result silently
    winning over a newer one would be a wrong number nobody sees, so the table and the log say which."""
    new = _results(tmp_path / "new.json", {"rmsnorm": _op({})}, "new run")
    old = _results(tmp_path / "old.json", {"rmsnorm": dict(_op({}), geomean_ratio=0.5), "rope": _op({})}, "old run")
    assert scripted.main(["--out", str(tmp_path / "m"), "--merge", str(new), str(old)]) == 0
    md = (tmp_path / "m" / "results.md").read_text()
    assert "| rmsnorm | memory-bound | accepted | 2.000 |" in md and "0.500" not in md
    merged = md.split("## Merged from", 1)[1]
    assert f"- rmsnorm: {new}" in merged and f"- rope: {old}" in merged
    assert f"left out (an operator already taken): rmsnorm from {old} (taken from {new})" in merged
    assert f"left out: rmsnorm from {old}" in capsys.readouterr().out
    again = scripted.json.loads((tmp_path / "m" / "results.json").read_text())
    assert set(again["operators"]) == {"rmsnorm", "rope"}


def test_a_merge_of_a_file_that_is_not_a_results_json_is_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.json"
    bad.write_text('{"rows": []}')
    assert scripted.main(["--out", str(tmp_path / "m"), "--merge", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--merge {bad}: not a results.json written by this benchmark" in err
    assert not (tmp_path / "m").exists()


def test_a_merge_of_runs_on_different_gpus_is_refused_in_one_line(tmp_path, capsys):
    """One table is labelled with one GPU: runs from two would put one's times under the other's name."""
    h200 = _results(tmp_path / "h200.json", {"rmsnorm": _op({})}, "a")
    b200 = _results(tmp_path / "b200.json", {"rope": _op({})}, "b", device="NVIDIA B200")
    assert scripted.main(["--out", str(tmp_path / "m"), "--merge", str(h200), str(b200)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was measured on NVIDIA B200" in err and "on NVIDIA H200" in err
    assert not (tmp_path / "m").exists()
