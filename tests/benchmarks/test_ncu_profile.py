"""benchmarks/ncu_profile.py: its default cases name what exists, it reads ncu's CSV into counters per
kernel, and it refuses loudly where it cannot measure (no GPU or no ncu) instead of writing an empty
table."""
import json

import pytest

from ablate import operators
from benchmarks import ncu_profile
from ablate.operators._operator import load_module

# ncu 2025.3 --csv --page details --nvtx, as it printed on the H200 (trimmed to the metrics used here):
# its own messages, then one row per metric or rule, with the NVTX range the kernel ran in
HEADER = ('"ID","Process ID","Process Name","Host Name","thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:'
          'Color:Msg_Type:Msg","Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
          '"Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name",'
          '"Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type",'
          '"Estimated Speedup"')


def _row(kid, kernel, section, metric, unit, value, rule=("", "", "")):
    nvtx = '"3539  ""<default domain>:profiled:none:none:none:none:none:none"" "'
    cells = [kid, "3539", "python3.12", "127.0.0.1"]
    return (",".join(f'"{c}"' for c in cells) + f",{nvtx}," + ",".join(
        f'"{c}"' for c in ["", kernel, "1", "7", "(256, 1, 1)", "(8192, 1, 1)", "0", "9.0", section, metric, unit,
                           value, *rule, "", ""]))


CSV = "\n".join([
    "==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling results may be "
    "inconsistent.",
    "==PROF== Connected to process 3539 (/usr/bin/python3.12)",
    "==PROF== Disconnected from process 3539",
    HEADER,
    _row("0", "_rmsnorm_rows", "GPU Speed Of Light Throughput", "DRAM Throughput", "%", "62.51"),
    _row("0", "_rmsnorm_rows", "GPU Speed Of Light Throughput", "Duration", "ns", "47,232"),
    _row("0", "_rmsnorm_rows", "Memory Workload Analysis", "Memory Throughput", "byte/s", "3,004,189,959,294.44"),
    _row("0", "_rmsnorm_rows", "Launch Statistics", "Block Size", "", "256"),
    _row("0", "_rmsnorm_rows", "Launch Statistics", "Grid Size", "", "8,192"),
    _row("0", "_rmsnorm_rows", "Occupancy", "Block Limit Registers", "block", "3"),
    _row("0", "_rmsnorm_rows", "Occupancy", "Block Limit Shared Mem", "block", "7"),
    _row("0", "_rmsnorm_rows", "Occupancy", "Block Limit Warps", "block", "8"),
    _row("0", "_rmsnorm_rows", "Occupancy", "Achieved Occupancy", "%", "34.66"),
    _row("0", "_rmsnorm_rows", "Occupancy", "Theoretical Occupancy", "%", "37.50"),
    _row("0", "_rmsnorm_rows", "Occupancy", "", "", "", ("TheoreticalOccupancy", "OPT", "This kernel's theoretical "
         "occupancy (37.5%) is limited by the number of required registers.")),
    _row("1", "elementwise_kernel", "GPU Speed Of Light Throughput", "Duration", "ms", "1.25"),
]) + "\n"


def test_the_csv_becomes_counters_per_kernel_in_launch_order():
    kernels = ncu_profile.parse_details(CSV)
    assert [k["name"] for k in kernels] == ["_rmsnorm_rows", "elementwise_kernel"]
    first = kernels[0]
    assert first["metrics"]["GPU Speed Of Light Throughput/DRAM Throughput"] == "62.51 %"
    assert first["rules"]["TheoreticalOccupancy"].endswith("limited by the number of required registers.")
    assert ncu_profile.duration_us(first) == pytest.approx(47.232)
    assert ncu_profile.duration_us(kernels[1]) == pytest.approx(1250.0)  # msecond, not microseconds


def test_the_table_shows_counters_and_says_what_was_not_profiled():
    results = [{"operator": "rmsnorm", "shape": "M=8192,N=5120", "impl": "template", "config": None,
                "kernels": ncu_profile.parse_details(CSV), "error": None},
               {"operator": "rmsnorm", "shape": "M=8192,N=5120", "impl": "quack", "config": None,
                "kernels": [], "error": "not profiled: quack-kernels is not installed"}]
    md = ncu_profile.markdown({"gpu": "NVIDIA H200", "torch": "2.11", "ncu": "ncu 2025.3", "command": "x"}, results)
    row = next(ln for ln in md.splitlines() if "_rmsnorm_rows" in ln)
    assert "| 47.2 | 141.9 | 62.51 |" in row  # 3.004 TB/s for 47.232 us and "| 35 (38) | 256 |" in row and "| 8,192 |" in row
    assert row.endswith("| 3: registers |")  # the smallest of the per-resource block limits
    assert "| quack | not profiled: quack-kernels is not installed |" in md


def test_render_writes_the_table_again_from_the_json(tmp_path):
    results = [{"operator": "rmsnorm", "shape": "M=8192,N=5120", "impl": "template", "config": None,
                "kernels": ncu_profile.parse_details(CSV), "error": None}]
    meta = {"gpu": "NVIDIA H200", "torch": "2.11", "ncu": "ncu 2025.3", "command": "x"}
    (tmp_path / "ncu_profile.json").write_text(json.dumps({"meta": meta, "results": results}))
    assert ncu_profile.main(["--out", str(tmp_path), "--render"]) == 0
    assert (tmp_path / "ncu_profile.md").read_text() == ncu_profile.markdown(meta, results)
    with pytest.raises(SystemExit):
        ncu_profile.main(["--out", str(tmp_path / "none"), "--render"])


def test_no_profile_without_a_gpu_and_ncu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert ncu_profile.main(["--out", str(tmp_path / "out")]) == 2
    assert "needs a CUDA GPU and Nsight Compute's ncu" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # no empty table that reads like a measurement


@pytest.mark.parametrize("case, message", [
    (["nosuchop", "M=1"], "give an operator (attention, "),
    (["softmax", "M=4,N=8", "{block: 1}"], "the configuration is not JSON"),
])
def test_a_bad_case_is_one_line_naming_it(case, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        ncu_profile.main(["--out", "unused", "--case", *case])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_shape_not_written_as_key_value_pairs_is_refused():
    with pytest.raises(SystemExit, match="write it as K=V,K=V"):
        ncu_profile.parse_shape("8192x5120")
    assert ncu_profile.parse_shape("M=8,N=16,dtype=float16") == {"M": 8, "N": 16, "dtype": "float16"}


@pytest.mark.parametrize("name, shape, config, libraries", ncu_profile.DEFAULT_CASES)
def test_each_default_case_names_a_shape_configuration_and_libraries_that_exist(name, shape, config, libraries):
    op = operators.get(name)
    assert set(libraries) <= set(op.baselines), f"{name} has no baseline {set(libraries) - set(op.baselines)}"
    template = load_module(ncu_profile.TEMPLATES / f"{name}.py", f"ncu_test_{name}")
    assert config is None or set(json.loads(config)) == set(template.CONFIG)
    dims = {k for k in ncu_profile.parse_shape(shape) if k != "dtype"}
    assert dims == {k for k in op.shapes["eval"][0] if k != "dtype"}
