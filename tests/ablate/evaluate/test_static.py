"""Static checks: parsing, finding `kernel`, and library passthrough through aliases."""
import pytest

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
    assert scan("import operators\ndef kernel(x, w): return x") == ["reference"]


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
