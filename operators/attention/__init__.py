"""Causal attention forward (prefill), bf16, with each SDPA backend as its own baseline."""
from pathlib import Path

import torch

from ablate.operators._baselines import compile_baselines
from ablate.operators._correctness import TOLERANCE
from ablate.operators._inputs import dtype_of, esize, generator, tensor
from ablate.operators._library_ops import ATTENTION_OPS, MATMUL_CALLS, MATMUL_OPS, SOFTMAX_CALLS, SOFTMAX_OPS
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.attention.reference")


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    dims = (shape["B"], shape["H"], shape["S"], shape["D"])
    return tuple(tensor(dims, dist, g, dtype_of(shape), device) for _ in range(3))


def _bytes(shape):
    return esize(shape) * 4 * shape["B"] * shape["H"] * shape["S"] * shape["D"]


def _flops(shape):
    # Two matmuls of 2*S*S*D each, halved by the causal mask.
    return 2 * shape["B"] * shape["H"] * shape["S"] * shape["S"] * shape["D"]


def _sdpa(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _backend(name):
    """SDPA pinned to one backend: a baseline per kernel, so the best one is visible per shape."""

    def run(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, name)):
            return _sdpa(q, k, v)

    return run


def _backend_unavailable(name):
    def unavailable():
        try:
            from torch.nn.attention import SDPBackend  # noqa: F401
        except ImportError:
            return "torch.nn.attention.sdpa_kernel needs torch >= 2.3"
        if not hasattr(SDPBackend, name):
            return f"this torch has no SDPBackend.{name}"
        if name == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
            return "cuDNN not available"
        return None

    return unavailable


SMOKE = [{"B": 1, "H": 2, "S": 64, "D": 32, "dtype": "bfloat16"}, {"B": 1, "H": 1, "S": 50, "D": 64, "dtype": "bfloat16"}]
PUBLIC = [{"B": 4, "H": 32, "S": 4096, "D": 128, "dtype": "bfloat16"}]
HIDDEN = [
    {"B": 16, "H": 16, "S": 1024, "D": 64, "dtype": "bfloat16"},
    {"B": 1, "H": 32, "S": 8192, "D": 128, "dtype": "bfloat16"},
    {"B": 2, "H": 24, "S": 3000, "D": 128, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="attention",
    goal=(
        "Implement causal multi-head attention forward for bfloat16 q, k, v [B, H, S, D] "
        "(contiguous): o = softmax(q @ k.T / sqrt(D) with query i seeing keys 0..i) @ v for each "
        "batch and head, scores and softmax accumulated in float32, returned as bfloat16 o "
        "[B, H, S, D]. The S x S score matrix need not be materialised (flash-attention style). "
        "reference.py holds the exact definition."
    ),
    reference=_ref.reference,
    make_inputs=make_inputs,
    shapes={"smoke": SMOKE, "public": PUBLIC, "eval": PUBLIC + HIDDEN},
    # Errors are relative to the output's scale: a contraction's rounding grows with its operands.
    tolerance=TOLERANCE,
    bytes=_bytes,
    flops=_flops,
    baselines={
        "torch_eager": Baseline("torch_eager", _ref.reference),
        "torch_F.sdpa": Baseline("torch_F.sdpa", _sdpa),  # default dispatch; runs on CPU too
        "sdpa_flash": Baseline("sdpa_flash", _backend("FLASH_ATTENTION"), _backend_unavailable("FLASH_ATTENTION"), needs_cuda=True),
        "sdpa_cudnn": Baseline("sdpa_cudnn", _backend("CUDNN_ATTENTION"), _backend_unavailable("CUDNN_ATTENTION"), needs_cuda=True),
        "sdpa_efficient": Baseline("sdpa_efficient", _backend("EFFICIENT_ATTENTION"), _backend_unavailable("EFFICIENT_ATTENTION"), needs_cuda=True),
        # Not max-autotune: it tunes the reference's materialised S x S matmuls, 43-128 s of compile
        # and autotuning a shape on an H200 (most of the judge's cold setup), for a time about 30x
        # the SDPA backends' (6.50 ms against 0.22 on B=2,H=24,S=3000), so it is never a best library.
        **compile_baselines(_ref.reference, autotune=False),
        # No FlashInfer baseline: its prefill kernels take and return token-major [S, H, D] tensors,
        # so the contract's [B, H, S, D] would cost a transposed copy of q and o per batch.
    },
    library_calls=(
        "torch.nn.functional.scaled_dot_product_attention", "F.scaled_dot_product_attention",
        "torch._scaled_dot_product_flash_attention", "torch._scaled_dot_product_efficient_attention",
        "torch._scaled_dot_product_cudnn_attention", "torch.nn.attention", "torch.nn.MultiheadAttention",
        "torch.nn.functional.multi_head_attention_forward", "torch.softmax", "torch.nn.functional.softmax",
        "F.softmax", "flash_attn", "flashinfer", "xformers", "quack",
    ) + MATMUL_CALLS + SOFTMAX_CALLS,
    library_ops=ATTENTION_OPS + SOFTMAX_OPS + MATMUL_OPS,
    task_files={"reference.py": HERE / "reference.py"},
    why_shapes="Prefill with head dim 128 (Llama-3, 32 heads, 4096-8192 tokens) and 64 (GPT-2/Llama-3.2-1B style, 1024 tokens); 3000 tokens with 24 heads is not a power of two.",
)
