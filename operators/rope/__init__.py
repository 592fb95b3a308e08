"""Rotary position embedding (RoPE) of q and k with grouped-query heads, bf16."""
from pathlib import Path

import torch

from ablate.operators._baselines import compile_baselines, flashinfer_unavailable, liger_unavailable
from ablate.operators._correctness import TOLERANCE, ContractRule
from ablate.operators._inputs import dtype_of, esize, generator, tensor
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.rope.reference")


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    dtype = dtype_of(shape)
    B, S, D = shape["B"], shape["S"], shape["D"]
    q = tensor((B, S, shape["Hq"], D), dist, g, dtype, device)
    k = tensor((B, S, shape["Hk"], D), dist, g, dtype, device)
    cos, sin = _ref.rope_cache(S, D, dtype, device)  # real angles: the dist applies to q and k
    return q, k, cos, sin


def _bytes(shape):
    qk = shape["B"] * shape["S"] * (shape["Hq"] + shape["Hk"]) * shape["D"]
    return esize(shape) * (2 * qk + 2 * shape["S"] * shape["D"])


def _flops(shape):
    return 3 * shape["B"] * shape["S"] * (shape["Hq"] + shape["Hk"]) * shape["D"]  # 2 mul + 1 add


def _liger(q, k, cos, sin):
    # Liger rotates in place in the token-major layout; it gets copies so the inputs stay
    # intact (the contract returns new tensors), which costs it one extra read and write.
    from liger_kernel.ops.rope import LigerRopeFunction

    qr, kr = LigerRopeFunction.apply(q.clone().transpose(1, 2), k.clone().transpose(1, 2), cos, sin)
    return qr.transpose(1, 2), kr.transpose(1, 2)


def _flashinfer(q, k, cos, sin):
    # FlashInfer takes token-major (tokens, heads * D) views of q and k, positions, and one float32
    # table of cos and sin halves; building the table and positions is O(S * D), not O(q).
    import flashinfer

    B, S, Hq, D = q.shape
    table = torch.cat((cos[:, : D // 2], sin[:, : D // 2]), dim=-1).float()
    positions = torch.arange(S, device=q.device).repeat(B)
    qr, kr = flashinfer.apply_rope_with_cos_sin_cache(positions, q.view(B * S, Hq * D), k.view(B * S, -1), D,
                                                      table, is_neox=True)
    return qr.view(q.shape), kr.view(k.shape)


def _cancelling(inputs):
    """Halves x1 = 1024 + 8a and x2 = x1 + 8 (a in -2..2) under cos = sin = bf16(sqrt(1/2)): the
    first half of the rotation, x1 cos - x2 sin = -8 cos, is exact in float32, while products
    rounded to bfloat16 first (ulp 4 near 724) leave it off by a third or more."""
    q, k, cos, sin = inputs

    def fill(t):
        D = t.shape[-1]
        x1 = 1024.0 + 8.0 * (torch.arange(D // 2, device=t.device) % 5 - 2)
        return torch.cat((x1, x1 + 8.0)).to(t.dtype).expand(t.shape).contiguous()

    half = torch.full_like(cos, 0.5 ** 0.5)
    return fill(q), fill(k), half, half.clone()


FLOAT32_ROTATION = ContractRule(
    "float32_rotation", "x * cos + rotate_half(x) * sin is computed in float32 and rounded once", _cancelling,
    limit=TOLERANCE["bfloat16"])


SMOKE = [
    {"B": 1, "S": 8, "Hq": 4, "Hk": 2, "D": 64, "dtype": "bfloat16"},
    {"B": 2, "S": 5, "Hq": 3, "Hk": 1, "D": 32, "dtype": "bfloat16"},
]
PUBLIC = [{"B": 1, "S": 8192, "Hq": 32, "Hk": 8, "D": 128, "dtype": "bfloat16"}]
HIDDEN = [
    {"B": 4, "S": 2048, "Hq": 64, "Hk": 8, "D": 128, "dtype": "bfloat16"},
    {"B": 2, "S": 3000, "Hq": 28, "Hk": 4, "D": 128, "dtype": "bfloat16"},
    {"B": 8, "S": 1024, "Hq": 32, "Hk": 8, "D": 64, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="rope",
    goal=(
        "Implement rotary position embedding (Llama convention) applied to q [B, S, Hq, D] and "
        "k [B, S, Hk, D] (bfloat16, contiguous, Hq a multiple of Hk) with cos [S, D] and sin [S, D] "
        "(bfloat16, shared by every batch and head): out = x * cos + rotate_half(x) * sin where "
        "rotate_half([x1, x2]) = [-x2, x1] over the two halves of the head dimension, computed in "
        "float32. Return the tuple (q_rotated, k_rotated), bfloat16, shaped like q and k; do not "
        "modify the inputs. reference.py holds the exact definition."
    ),
    reference=_ref.reference,
    make_inputs=make_inputs,
    shapes={"smoke": SMOKE, "public": PUBLIC, "eval": PUBLIC + HIDDEN},
    tolerance=TOLERANCE,
    bytes=_bytes,
    flops=_flops,
    baselines={
        "torch_eager": Baseline("torch_eager", _ref.reference),
        **compile_baselines(_ref.reference),
        # Rotates in bfloat16 (liger 0.8.5: its tiles are cast to the table's dtype): excluded by
        # FLOAT32_ROTATION.
        "liger": Baseline("liger", _liger, liger_unavailable, needs_cuda=True),
        "flashinfer": Baseline("flashinfer", _flashinfer, flashinfer_unavailable, needs_cuda=True),
    },
    library_calls=(
        # modules only: a bare function name would flag an agent's own apply_rotary_pos_emb
        "transformers", "flash_attn", "flashinfer", "vllm", "liger_kernel", "quack",
    ),
    task_files={"reference.py": HERE / "reference.py"},
    contract_rules=(FLOAT32_ROTATION,),
    why_shapes="Grouped-query heads of Llama-3 8B (32/8) and 70B (64/8), Qwen2.5-7B (28/4) and Llama-3.2-1B (head dim 64), 1024-8192 tokens; 3000 tokens is not a power of two.",
)
