"""analysis/notebooks/ratios.ipynb runs top to bottom against a small generated store."""
import os
from pathlib import Path

import pytest

from benchmarks.synthetic import write_study, write_trial

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "analysis" / "notebooks" / "ratios.ipynb"


@pytest.mark.timeout(240)
def test_the_notebook_reproduces_the_tables_and_plots(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    write_study(tmp_path, {"goal_only": 1.0, "kda05": 1.25}, ["rmsnorm", "softmax"], seeds=3, sd=0.05)
    write_trial(tmp_path, "kda05", 5, None, "rejected")
    monkeypatch.setenv("ABLATE_STUDY", str(tmp_path / "study"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")  # committed without outputs
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "13 trials" in text and "kda05 / goal_only" in text and "fast_1.5" in text and "sol_score" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 4
