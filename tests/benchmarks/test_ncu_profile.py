"""benchmarks/ncu_profile.py: its default cases name what exists, it reads ncu's CSV into counters per
kernel, and it refuses loudly where it cannot measure (no GPU or no ncu) instead of writing an empty
table."""
import json

import pytest

import operators
from benchmarks import ncu_profile
from operators._operator import load_module

# ncu --csv --page details, as ncu 2025 prints it: its own messages, then one row per metric or rule
CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "_rmsnorm_fwd" - 0: 0%....50%....100% - 9 passes
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"
"0","4242","python3.12","127.0.0.1","_rmsnorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","81.52","","","","",""
"0","4242","python3.12","127.0.0.1","_rmsnorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","usecond","53.44","","","","",""
"0","4242","python3.12","127.0.0.1","_rmsnorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Launch Statistics","Grid Size","","8,192","","","","",""
"0","4242","python3.12","127.0.0.1","_rmsnorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Occupancy","Achieved Occupancy","%","61.3","","","","",""
"0","4242","python3.12","127.0.0.1","_rmsnorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Occupancy","Theoretical Occupancy","%","100","","","","",""
"0","4242","python3.12","127.0.0.1","_rmsnorm_fwd","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","WarpStateStats","","","","CPIStall","OPT","On average, each warp of this kernel spends 12.1 cycles being stalled waiting for a scoreboard dependency on a L1TEX operation.","global","18.2"
"1","4242","python3.12","127.0.0.1","elementwise_kernel","1","7","(256, 1, 1)","(4, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","msecond","1.25","","","","",""
'''


def test_the_csv_becomes_counters_per_kernel_in_launch_order():
    kernels = ncu_profile.parse_details(CSV)
    assert [k["name"] for k in kernels] == ["_rmsnorm_fwd", "elementwise_kernel"]
    first = kernels[0]
    assert first["metrics"]["GPU Speed Of Light Throughput/DRAM Throughput"] == "81.52 %"
    assert first["rules"]["CPIStall"].startswith("On average, each warp")
    assert ncu_profile.duration_us(first) == pytest.approx(53.44)
    assert ncu_profile.duration_us(kernels[1]) == pytest.approx(1250.0)  # msecond, not microseconds


def test_the_table_shows_counters_and_says_what_was_not_profiled():
    results = [{"operator": "rmsnorm", "shape": "M=8192,N=5120", "impl": "template", "config": None,
                "kernels": ncu_profile.parse_details(CSV), "error": None},
               {"operator": "rmsnorm", "shape": "M=8192,N=5120", "impl": "quack", "config": None,
                "kernels": [], "error": "not profiled: quack-kernels is not installed"}]
    md = ncu_profile.markdown({"gpu": "NVIDIA H200", "torch": "2.11", "ncu": "ncu 2025.3", "command": "x"}, results)
    row = next(ln for ln in md.splitlines() if "_rmsnorm_fwd" in ln)
    assert "| 53.4 | 81.52 |" in row and "| 61 (100) |" in row and "| 8,192 |" in row
    assert "scoreboard dependency" in row
    assert "| quack | not profiled: quack-kernels is not installed |" in md


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
