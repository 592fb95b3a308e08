"""FlashInfer Trace definitions and workloads (small ones written for these tests) as operators,
and accepted kernels exported as FlashInfer Solutions."""
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

from ablate import operators
from ablate.errors import AblateError
from ablate.operators import flashinfer

DATA = Path(__file__).parent / "data" / "flashinfer"
HAS_SAFETENSORS = importlib.util.find_spec("safetensors") is not None


@pytest.fixture(autouse=True)
def _forget_loaded():
    yield
    operators._loaded.clear()


def _ops():
    return {o.name: o for o in flashinfer.load(DATA)}


def test_definitions_become_operators_with_workloads_as_shapes():
    ops = _ops()
    assert set(ops) == {"flashinfer/rmsnorm_h128", "flashinfer/moe_router_topk2_e8"}
    rms = ops["flashinfer/rmsnorm_h128"]
    assert [s["batch_size"] for s in rms.shapes["eval"]] == [7, 3, 33]  # bare and Trace-wrapped lines
    assert rms.shapes["public"] == rms.shapes["eval"][:1]
    assert rms.shapes["smoke"][0]["batch_size"] == 3
    assert all(s["dtype"] == "bfloat16" for s in rms.shapes["eval"])
    assert "kernel(hidden_states, weight, eps)" in rms.goal and "hidden_size=128" in rms.goal
    assert rms.task_files["reference.py"].read_text().startswith("import torch")
    assert json.loads(rms.task_files["definition.json"].read_text())["name"] == "rmsnorm_h128"


def test_inputs_follow_the_workload():
    rms = _ops()["flashinfer/rmsnorm_h128"]
    shape = rms.shapes["eval"][1]
    x, w, eps = rms.make_inputs(shape, 0, "cpu", "offset")
    assert x.shape == (3, 128) and x.dtype == torch.bfloat16 and w.shape == (128,)
    assert eps == 1e-5 and isinstance(eps, float)  # the workload's scalar
    assert float(x.float().mean()) > 2  # the distribution applies to random inputs
    x2, *_ = rms.make_inputs(shape, 0, "cpu", "offset")
    assert torch.equal(x, x2)


def test_reference_runs_and_dict_outputs_become_a_tuple():
    ops = _ops()
    rms = ops["flashinfer/rmsnorm_h128"]
    for shape in rms.shapes["eval"]:
        inputs = rms.make_inputs(shape, 0, "cpu", "normal")
        out = rms.reference(*inputs)
        assert out.shape == (shape["batch_size"], 128)
        assert rms.verify(rms.baselines["torch_eager"].fn(*inputs), inputs).ok
        assert rms.bytes(shape) == shape["batch_size"] * 128 * 2 * 2 + 128 * 2 + 4
    router = ops["flashinfer/moe_router_topk2_e8"]
    shape = router.shapes["public"][0]
    (logits,) = router.make_inputs(shape, 0, "cpu", "normal")
    weights, experts = router.reference(logits)
    assert weights.shape == experts.shape == (16, 2) and experts.dtype == torch.int64
    assert router.tolerance["int64"] == 0.0 and router.tolerance["bfloat16"] == 1e-2


def test_smoke_prefers_workloads_without_stored_inputs():
    router = _ops()["flashinfer/moe_router_topk2_e8"]
    assert router.shapes["smoke"][0]["num_tokens"] == 16  # the 5-token one needs a safetensors file


@pytest.mark.skipif(HAS_SAFETENSORS, reason="checks the message shown when safetensors is missing")
def test_safetensors_input_without_the_package_is_a_clear_error():
    router = _ops()["flashinfer/moe_router_topk2_e8"]
    with pytest.raises(AblateError, match="pip install safetensors"):
        router.make_inputs(router.shapes["eval"][1], 0, "cpu", "normal")


@pytest.mark.skipif(not HAS_SAFETENSORS, reason="safetensors not installed")
def test_safetensors_input_is_loaded(tmp_path):
    from safetensors.torch import save_file

    root = tmp_path / "trace"
    shutil.copytree(DATA, root)
    (root / "blobs").mkdir()
    stored = torch.randn(5, 8)
    save_file({"router_logits": stored}, str(root / "blobs" / "router.safetensors"))
    router = {o.name: o for o in flashinfer.load(root)}["flashinfer/moe_router_topk2_e8"]
    (logits,) = router.make_inputs(router.shapes["eval"][1], 0, "cpu", "normal")
    assert torch.equal(logits, stored)


def test_select_definitions_and_errors(tmp_path):
    assert [o.name for o in flashinfer.load(DATA, ["flashinfer/rmsnorm_h128"])] == ["flashinfer/rmsnorm_h128"]
    with pytest.raises(AblateError, match="valid: moe_router_topk2_e8, rmsnorm_h128"):
        flashinfer.load(DATA, ["gemm_n4096"])
    with pytest.raises(AblateError, match="no FlashInfer Trace dataset"):
        flashinfer.load(tmp_path / "missing")
    lonely = tmp_path / "definitions" / "x.json"
    lonely.parent.mkdir()
    lonely.write_text((DATA / "definitions" / "rmsnorm" / "rmsnorm_h128.json").read_text())
    with pytest.raises(AblateError, match="no workloads"):
        flashinfer.load(lonely)


def test_one_definition_file_finds_its_workloads():
    ops = flashinfer.load(DATA / "definitions" / "rmsnorm" / "rmsnorm_h128.json")
    assert len(ops[0].shapes["eval"]) == 3


def test_load_set_and_get():
    ops = operators.load_set({"source": "flashinfer", "flashinfer": {"path": str(DATA)}, "names": ["rmsnorm_h128"]})
    assert operators.get("flashinfer/rmsnorm_h128") is ops[0]
    assert ops[0].source["source"] == "flashinfer"


def test_export_solution_runs_as_flashinfer_calls_it(tmp_path):
    rms = _ops()["flashinfer/rmsnorm_h128"]
    kernel = tmp_path / "kernel.py"
    kernel.write_text(
        "import torch\n\n"
        "def run():  # the kernel's own run(): the entry point must not replace it\n"
        "    return 'mine'\n\n"
        "def kernel(x, w, eps):\n"
        "    xf = x.float()\n"
        "    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)\n"
    )
    out = tmp_path / "solutions" / "rms.json"
    sol = flashinfer.export_solution("flashinfer/rmsnorm_h128", kernel, out, author="agent-x")
    assert json.loads(out.read_text()) == sol
    assert sol["definition"] == "rmsnorm_h128" and sol["author"] == "agent-x"
    assert sol["spec"]["language"] == "python" and sol["spec"]["destination_passing_style"] is False
    assert sol["spec"]["target_hardware"] == ["NVIDIA_H200"]
    path, fn = sol["spec"]["entry_point"].split("::")
    assert path == "main.py" and fn == "ablate_run"
    assert [s["path"] for s in sol["sources"]] == ["main.py"]
    namespace = {}
    exec(sol["sources"][0]["content"], namespace)
    shape = rms.shapes["eval"][0]
    inputs = rms.make_inputs(shape, 0, "cpu", "normal")
    assert namespace["run"]() == "mine"
    assert rms.verify(namespace[fn](*inputs), inputs).ok


def test_export_solution_language_and_errors(tmp_path):
    triton_kernel = tmp_path / "k.py"
    triton_kernel.write_text("import triton\n\ndef kernel(router_logits):\n    return router_logits\n")
    defn = DATA / "definitions" / "moe_router" / "moe_router_topk2_e8.json"
    sol = flashinfer.export_solution(defn, triton_kernel, tmp_path / "s.json")
    assert sol["spec"]["language"] == "triton" and sol["spec"]["entry_point"] == "main.py::run"
    assert "def run(router_logits):" in sol["sources"][0]["content"]
    assert sol["spec"]["dependencies"] == ["torch", "triton"]
    bad = tmp_path / "bad.py"
    bad.write_text("def kernel(:\n")
    with pytest.raises(AblateError, match="not valid Python"):
        flashinfer.export_solution(defn, bad, tmp_path / "t.json")
    bad.write_text("def other():\n    pass\n")
    with pytest.raises(AblateError, match="defines no kernel"):
        flashinfer.export_solution(defn, bad, tmp_path / "t.json")
