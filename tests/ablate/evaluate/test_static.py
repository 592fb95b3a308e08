"""Static checks: parsing, finding `kernel`, and library passthrough through aliases."""
import pytest

from ablate.evaluate import _static
from ablate.evaluate._static import defines_kernel, parse, passthrough

RMS = ("torch.nn.functional.rms_norm", "torch.rms_norm", "F.rms_norm", "liger_kernel")


def scan(src, calls=RMS):
    tree, err = parse(src)
    assert err is None
    return passthrough(tree, calls)


def test_syntax_error_names_the_line():
    tree, err = parse("def kernel(x)\n    return x\n")
    assert tree is None and err.startswith("line 1")


@pytest.mark.parametrize("src,expected", [
    ("def kernel(x, w):\n    return x\n", True),
    ("kernel = lambda x, w: x\n", True),
    ("from mylib import fast as kernel\n", True),
    ("class kernel:\n    pass\n", True),
    ("def rmsnorm(x, w):\n    return x\n", False),
    ("globals()['kernel'] = print\n", True),  # dynamic: the benefit of the doubt
])
def test_defines_kernel(src, expected):
    tree, _ = parse(src)
    assert defines_kernel(tree, src) is expected


@pytest.mark.parametrize("src", [
    "import torch.nn.functional as F\ndef kernel(x, w): return F.rms_norm(x, (4,), w)",
    "import torch\ndef kernel(x, w): return torch.nn.functional.rms_norm(x, (4,), w)",
    "from torch.nn import functional as G\ndef kernel(x, w): return G.rms_norm(x, (4,), w)",
    "from torch.nn.functional import rms_norm as r\ndef kernel(x, w): return r(x, (4,), w)",
    "import torch\ndef kernel(x, w): return getattr(torch, 'rms_norm')(x, (4,), w)",
    "import torch\nf = torch.rms_norm\ndef kernel(x, w):\n    try:\n        return 1/0\n    except Exception:\n        return f(x, (4,), w)",
    "from liger_kernel.ops.rms_norm import LigerRMSNormFunction\ndef kernel(x, w): return LigerRMSNormFunction.apply(x, w, 1e-6)",
    "import importlib\nm = importlib.import_module('liger_kernel')\ndef kernel(x, w): return x",
])
def test_library_passthrough_is_found_through_aliases(src):
    assert scan(src)


def test_calling_the_reference_is_a_passthrough():
    assert scan("from reference import reference\ndef kernel(x, w): return reference(x, w)") == ["reference"]
    assert scan("from ablate import operators\ndef kernel(x, w): return x") == ["reference"]


def test_honest_sources_are_clean(kernels):
    for name in ("honest_triton", "honest_torch"):
        assert scan((kernels / f"{name}.py").read_text()) == []


def test_adversarial_passthrough_files_are_caught(kernels):
    assert "torch.nn.functional.rms_norm" in scan((kernels / "passthrough.py").read_text())
    assert scan((kernels / "passthrough_fallback.py").read_text()) == ["torch.rms_norm"]


def test_method_and_matmul_patterns():
    calls = ("Tensor.softmax", "@", "torch.matmul")
    assert scan("def kernel(x): return x.float().softmax(-1)", calls) == ["Tensor.softmax"]
    assert scan("import triton.language as tl\ndef f(x): return tl.softmax(x)", calls) == []
    assert scan("def kernel(a, b): return a @ b", calls) == ["@"]
    assert scan("import torch\ndef kernel(a, b): return torch.matmul(a, b)", calls) == ["torch.matmul"]


@pytest.mark.parametrize("name,found", [("passthrough_cupy", "cupy.matmul"), ("passthrough_numpy", "numpy.matmul")])
def test_another_array_librarys_product_is_a_gemm_passthrough(kernels, name, found):
    """CuPy's matmul is cuBLAS, NumPy's the CPU's BLAS: no ATen operator runs, so only the scan sees them."""
    from ablate import operators

    assert found in scan((kernels / f"{name}.py").read_text(), operators.get("gemm").library_calls)
    assert scan("import cupy as cp\ndef kernel(a, b): return cp.RawKernel('', 'k')", operators.get("gemm").library_calls) == []


def flagged(src: str) -> list[str]:
    tree, err = _static.parse(src)
    assert tree is not None, err
    return _static.forbidden(tree)


@pytest.mark.parametrize("src,what", [
    ("import sys\ndef kernel(x): return sys._getframe(1)", "sys._getframe"),
    ("from sys import _getframe as g\ndef kernel(x): return g()", "sys._getframe"),
    ("import inspect\ndef kernel(x): return inspect.stack()", "inspect.stack"),
    ("import gc\ndef kernel(x): return gc.get_objects()", "gc.get_objects"),
    ("import ctypes\ndef kernel(x): return x", "ctypes"),
    ("import importlib\nc = importlib.import_module('ctypes')\ndef kernel(x): return x", "ctypes"),
    ("import os\ndef kernel(x):\n    os.fork()\n    return x", "os.fork"),
    ("import subprocess\ndef kernel(x): return x", "subprocess"),
    ("import _posixsubprocess\ndef kernel(x): return x", "_posixsubprocess"),
    ("def kernel(x):\n    kernel.__code__ = None\n    return x", "__code__"),
    ("def kernel(x):\n    return open('/proc/self/mem').read()", "the path '/proc/self/mem'"),
    ("def kernel(x):\n    return eval('x')", "eval()"),
    ("import torch\ndef kernel(x): return torch.ops.aten.rms_norm(x, [4])", "torch.ops"),
    ("import torch\ndef kernel(x): return torch._fused_rms_norm(x, [4])", "private torch API torch._fused_rms_norm"),
    ("import torch.nn.functional as F\ndef kernel(x): return getattr(F, 'rms' + '_norm')(x)",
     "getattr() on the module torch.nn.functional"),
    ("import sys\ndef kernel(x): return sys.modules['operators']", "sys.modules"),
    ("import builtins\nbuiltins.len = None\ndef kernel(x): return x", "builtins"),
])
def test_forbidden_constructs_are_flagged_with_their_line(src, what):
    found = flagged(src)
    assert any(f.startswith(what) for f in found), found


def test_honest_kernels_use_nothing_forbidden(kernels):
    for name in ("honest_triton", "honest_torch", "honest_cupy", "cache_marker"):
        assert flagged((kernels / f"{name}.py").read_text()) == [], name
    assert flagged("import re\nPAT = re.compile('x')\ndef kernel(x): return x") == []  # re.compile is not compile()
    assert flagged("import torch\ndef kernel(x): return getattr(x, 'shape')") == []  # attributes of values
