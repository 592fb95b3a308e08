"""RMSNorm forward (Llama-style pre-norm), bf16."""
from pathlib import Path

import torch

from ablate.operators._baselines import compile_baselines, flashinfer_unavailable, liger_unavailable, quack_unavailable
from ablate.operators._correctness import TOLERANCE
from ablate.operators._inputs import DTYPES, generator, tensor
from ablate.operators._library_ops import NORMALISATION_OPS
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.rmsnorm.reference")


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    dtype = DTYPES[shape.get("dtype", "bfloat16")]
    x = tensor((shape["M"], shape["N"]), dist, g, dtype, device)
    weight = tensor((shape["N"],), "normal", g, dtype, device)
    return x, weight


def _bytes(shape):
    esize = torch.finfo(DTYPES[shape.get("dtype", "bfloat16")]).bits // 8
    return esize * (2 * shape["M"] * shape["N"] + shape["N"])


def _flops(shape):
    return 4 * shape["M"] * shape["N"]


def _f_rms_norm(x, weight):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, _ref.EPS)


def _liger(x, weight):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    return LigerRMSNormFunction.apply(x, weight, _ref.EPS)


def _quack(x, weight):
    from quack.rmsnorm import rmsnorm_fwd

    return rmsnorm_fwd(x, weight, eps=_ref.EPS)[0]  # forward only: (out, residual_out, rstd)


def _flashinfer(x, weight):
    import flashinfer

    return flashinfer.rmsnorm(x, weight, eps=_ref.EPS)


SMOKE = [{"M": 8, "N": 512, "dtype": "bfloat16"}, {"M": 5, "N": 1000, "dtype": "bfloat16"}]
PUBLIC = [{"M": 16384, "N": 4096, "dtype": "bfloat16"}]
HIDDEN = [
    {"M": 32768, "N": 8192, "dtype": "bfloat16"},
    {"M": 8192, "N": 5120, "dtype": "bfloat16"},
    {"M": 4000, "N": 7168, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="rmsnorm",
    goal=(
        "Implement RMSNorm over the last dimension of a bfloat16 matrix x [M, N] with a bfloat16 "
        "weight [N]: y = x / sqrt(mean(x**2) + 1e-6) * weight, accumulated in float32, returned "
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
        "torch_F.rms_norm": Baseline("torch_F.rms_norm", _f_rms_norm),
        **compile_baselines(_ref.reference),
        "liger": Baseline("liger", _liger, liger_unavailable, needs_cuda=True),
        "quack": Baseline("quack", _quack, quack_unavailable, needs_cuda=True),
        "flashinfer": Baseline("flashinfer", _flashinfer, flashinfer_unavailable, needs_cuda=True),
    },
    library_calls=("torch.nn.functional.rms_norm", "torch.rms_norm", "F.rms_norm", "liger_kernel", "quack",
                   "flashinfer"),
    library_ops=NORMALISATION_OPS,
    task_files={"reference.py": HERE / "reference.py"},
    why_shapes="Llama-3 8B/70B, Mistral and DeepSeek-V3 hidden sizes (4096, 8192, 5120, 7168) times token batches.",
)
