"""SwiGLU activation (silu(gate) * up) of Llama-style MLPs, bf16."""
from pathlib import Path

import torch

from ablate.operators._baselines import compile_baselines, liger_unavailable
from ablate.operators._correctness import TOLERANCE
from ablate.operators._inputs import dtype_of, esize, generator, tensor
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.swiglu.reference")


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    dtype = dtype_of(shape)
    gate = tensor((shape["M"], shape["N"]), dist, g, dtype, device)
    up = tensor((shape["M"], shape["N"]), dist, g, dtype, device)
    return gate, up


def _bytes(shape):
    return esize(shape) * 3 * shape["M"] * shape["N"]


def _flops(shape):
    return 5 * shape["M"] * shape["N"]  # negate, exp, add, divide, multiply


def _f_silu(gate, up):
    return torch.nn.functional.silu(gate) * up  # bf16 intermediate: one extra rounding, within tolerance


def _liger(gate, up):
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    return LigerSiLUMulFunction.apply(gate, up)


SMOKE = [{"M": 8, "N": 512, "dtype": "bfloat16"}, {"M": 5, "N": 1000, "dtype": "bfloat16"}]
PUBLIC = [{"M": 16384, "N": 14336, "dtype": "bfloat16"}]
HIDDEN = [
    {"M": 8192, "N": 28672, "dtype": "bfloat16"},
    {"M": 4096, "N": 18432, "dtype": "bfloat16"},
    {"M": 3000, "N": 11008, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="swiglu",
    goal=(
        "Implement the SwiGLU activation of two bfloat16 matrices gate [M, N] and up [M, N]: "
        "y = silu(gate) * up with silu(g) = g * sigmoid(g), computed in float32, returned as "
        "bfloat16 [M, N]. reference.py holds the exact definition."
    ),
    reference=_ref.reference,
    make_inputs=make_inputs,
    shapes={"smoke": SMOKE, "public": PUBLIC, "eval": PUBLIC + HIDDEN},
    tolerance=TOLERANCE,
    bytes=_bytes,
    flops=_flops,
    baselines={
        "torch_eager": Baseline("torch_eager", _ref.reference),
        "torch_F.silu": Baseline("torch_F.silu", _f_silu),
        **compile_baselines(_ref.reference),
        "liger": Baseline("liger", _liger, liger_unavailable, needs_cuda=True),
    },
    library_calls=(
        "torch.nn.functional.silu", "F.silu", "torch.nn.SiLU", "torch.sigmoid", "Tensor.sigmoid",
        "torch.nn.functional.sigmoid", "torch.special.expit", "liger_kernel", "quack",
    ),
    library_ops=("aten::silu", "aten::silu_", "aten::glu"),
    task_files={"reference.py": HERE / "reference.py"},
    why_shapes="MLP intermediate sizes of Llama-3 8B (14336) and 70B (28672), DeepSeek-V3 dense layers (18432) and Llama-2 7B (11008); 3000 rows is not a power of two.",
)
