"""benchmarks/copy_in.py's kernels: each the honest Triton RMSNorm with one piece of fused_batch's
twin added, each an honest kernel the judge accepts (on a CPU here; the copy-in it measures is a GPU's)."""
import ast
import json
import os

import pytest

from benchmarks import copy_in


def test_each_kernel_adds_the_one_piece_it_names():
    src = copy_in.variants()
    assert set(src) == set(copy_in.NAMES)
    for name, text in src.items():
        ast.parse(text, name)
    launches = {name: text.count("_rmsnorm[(M,)]") for name, text in src.items()}
    assert launches == {"honest": 1, "launches2": 1, "launches8": 1, "pinread": 1, "setitems": 1, "twin": 0}
    assert "range(2)" in src["launches2"] and "range(8)" in src["launches8"]
    assert "_peek[(1,)]" in src["pinread"] and "host[0]" not in src["pinread"]
    assert "host[0], host[1]" in src["setitems"] and "_peek[(1,)]" not in src["setitems"]
    assert "\nFUSE = False\n" in src["twin"]


def test_a_kernel_source_that_moved_on_is_one_line_naming_what_to_edit(tmp_path, monkeypatch):
    (tmp_path / "honest_triton.py").write_text("def kernel(x, weight):\n    return x\n")
    (tmp_path / "fused_batch.py").write_text("FUSE = True\n")
    monkeypatch.setattr(copy_in, "KERNELS", tmp_path)
    with pytest.raises(SystemExit) as e:
        copy_in.variants()
    assert "honest_triton.py no longer has" in str(e.value) and "edit benchmarks/copy_in.py" in str(e.value)


def test_the_pinned_memory_kernels_are_honest_and_each_gets_its_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ABLATE_EVAL_BASELINES", raising=False)
    assert copy_in.main(["--out", str(tmp_path), "--kernels", "pinread", "setitems"]) == 0
    assert "ABLATE_EVAL_BASELINES" not in os.environ  # the one library is this run's, not the process's after it
    out, err = capsys.readouterr()
    # its progress shows as it goes: a run on a GPU that printed nothing for 240 s said nothing of where it was
    assert "pinread: judging" in err and "setitems: judging" in err and "correct" in err
    lines = [json.loads(ln) for ln in out.splitlines()]
    assert [ln["kernel"] for ln in lines] == ["pinread", "setitems"]
    assert all(ln["verdict"] == "accepted" for ln in lines), lines
    assert all(s["time_ms"] and s["copy_in_us"] is None for ln in lines for s in ln["shapes"])  # a CPU: no copy-in
    assert json.loads((tmp_path / "copy-in.json").read_text())["rows"] == lines


def test_a_library_the_operator_lacks_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("ABLATE_EVAL_BASELINES", raising=False)
    with pytest.raises(SystemExit) as e:
        copy_in.main(["--out", str(tmp_path), "--kernels", "honest", "--library", "torch_nope"])
    assert str(e.value).startswith("copy_in: ") and "torch_nope" in str(e.value) and "\n" not in str(e.value)
    assert "ABLATE_EVAL_BASELINES" not in os.environ and not (tmp_path / "copy-in.json").exists()
