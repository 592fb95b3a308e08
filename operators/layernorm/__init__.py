"""LayerNorm forward (GPT/ViT-style, with weight and bias), bf16."""
from pathlib import Path

import torch

from ablate.operators._baselines import compile_baselines, flashinfer_unavailable, liger_unavailable, quack_unavailable
from ablate.operators._correctness import TOLERANCE
from ablate.operators._inputs import dtype_of, esize, generator, tensor
from ablate.operators._library_ops import NORMALISATION_OPS
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.layernorm.reference")


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    dtype = dtype_of(shape)
    x = tensor((shape["M"], shape["N"]), dist, g, dtype, device)
    weight = tensor((shape["N"],), "normal", g, dtype, device)
    bias = tensor((shape["N"],), "normal", g, dtype, device)
    return x, weight, bias


def _bytes(shape):
    return esize(shape) * (2 * shape["M"] * shape["N"] + 2 * shape["N"])


def _flops(shape):
    return 8 * shape["M"] * shape["N"]  # mean, centre, square, sum, scale, weight, bias: ~8 per element


def _f_layer_norm(x, weight, bias):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, _ref.EPS)


def _liger(x, weight, bias):
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return LigerLayerNormFunction.apply(x, weight, bias, _ref.EPS)


# quack and FlashInfer take float32 weight and bias: converting the two [N] vectors is exact and
# O(N), beside the O(M * N) normalisation.
def _quack(x, weight, bias):
    from quack.rmsnorm import layernorm_fwd

    return layernorm_fwd(x, weight.float(), bias.float(), eps=_ref.EPS)


def _flashinfer(x, weight, bias):
    import flashinfer

    return flashinfer.layernorm(x, weight.float(), bias.float(), _ref.EPS)


SMOKE = [{"M": 8, "N": 512, "dtype": "bfloat16"}, {"M": 5, "N": 1000, "dtype": "bfloat16"}]
PUBLIC = [{"M": 16384, "N": 4096, "dtype": "bfloat16"}]
HIDDEN = [
    {"M": 32768, "N": 8192, "dtype": "bfloat16"},
    {"M": 8192, "N": 5120, "dtype": "bfloat16"},
    {"M": 4000, "N": 7168, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="layernorm",
    goal=(
        "Implement LayerNorm over the last dimension of a bfloat16 matrix x [M, N] with bfloat16 "
        "weight [N] and bias [N]: y = (x - mean) / sqrt(var + 1e-5) * weight + bias, where mean and "
        "the biased variance (divide by N) are taken over each row, accumulated in float32, returned "
        "as bfloat16 [M, N]. reference.py holds the exact definition."
    ),
    reference=_ref.reference,
    make_inputs=make_inputs,
    shapes={"smoke": SMOKE, "public": PUBLIC, "eval": PUBLIC + HIDDEN},
    tolerance=TOLERANCE,
    bytes=_bytes,
    flops=_flops,
    baselines={
        "torch_eager": Baseline("torch_eager", _ref.reference),
        "torch_F.layer_norm": Baseline("torch_F.layer_norm", _f_layer_norm),
        **compile_baselines(_ref.reference),
        "liger": Baseline("liger", _liger, liger_unavailable, needs_cuda=True),
        "quack": Baseline("quack", _quack, quack_unavailable, needs_cuda=True),
        "flashinfer": Baseline("flashinfer", _flashinfer, flashinfer_unavailable, needs_cuda=True),
    },
    library_calls=(
        "torch.nn.functional.layer_norm", "torch.layer_norm", "F.layer_norm", "torch.nn.LayerNorm",
        "torch.native_layer_norm", "liger_kernel", "quack", "apex", "flashinfer",
    ),
    library_ops=NORMALISATION_OPS,
    task_files={"reference.py": HERE / "reference.py"},
    why_shapes="Hidden sizes of GPT-style and Llama-family models (4096, 8192, 5120, 7168) times token batches; 4000 rows is not a power of two.",
)
