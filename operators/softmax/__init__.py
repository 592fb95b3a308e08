"""Row-wise softmax forward (attention scores, vocabulary distributions), bf16."""
from pathlib import Path

import torch

from ablate.operators._baselines import compile_baselines, liger_unavailable, quack_unavailable
from ablate.operators._correctness import TOLERANCE
from ablate.operators._inputs import dtype_of, esize, generator, tensor
from ablate.operators._library_ops import SOFTMAX_CALLS, SOFTMAX_OPS
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.softmax.reference")


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    return (tensor((shape["M"], shape["N"]), dist, g, dtype_of(shape), device),)


def _bytes(shape):
    return esize(shape) * 2 * shape["M"] * shape["N"]


def _flops(shape):
    return 5 * shape["M"] * shape["N"]  # max, subtract, exp, sum, divide


def _f_softmax(x):
    return torch.nn.functional.softmax(x, dim=-1)  # accumulates in float32 for bf16 inputs


def _liger(x):
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    return LigerSoftmaxFunction.apply(x)


def _quack(x):
    import quack

    return quack.softmax(x)


SMOKE = [
    {"M": 8, "N": 512, "dtype": "bfloat16"},
    {"M": 5, "N": 1000, "dtype": "bfloat16"},
    {"M": 3, "N": 5000, "dtype": "bfloat16"},  # wider than one block of most kernels
]
PUBLIC = [{"M": 16384, "N": 4096, "dtype": "bfloat16"}]
HIDDEN = [
    {"M": 8192, "N": 32768, "dtype": "bfloat16"},
    {"M": 2048, "N": 128256, "dtype": "bfloat16"},
    {"M": 12000, "N": 3072, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="softmax",
    goal=(
        "Implement a row-wise softmax over the last dimension of a bfloat16 matrix x [M, N]: "
        "y = exp(x - rowmax) / sum(exp(x - rowmax)), accumulated in float32, returned as bfloat16 "
        "[M, N]. Rows can be wide (a 128256-entry vocabulary). reference.py holds the exact definition."
    ),
    reference=_ref.reference,
    make_inputs=make_inputs,
    shapes={"smoke": SMOKE, "public": PUBLIC, "eval": PUBLIC + HIDDEN},
    tolerance=TOLERANCE,
    bytes=_bytes,
    flops=_flops,
    baselines={
        "torch_eager": Baseline("torch_eager", _ref.reference),
        "torch_F.softmax": Baseline("torch_F.softmax", _f_softmax),
        **compile_baselines(_ref.reference),
        "liger": Baseline("liger", _liger, liger_unavailable, needs_cuda=True),
        "quack": Baseline("quack", _quack, quack_unavailable, needs_cuda=True),
    },
    library_calls=(
        "torch.nn.functional.softmax", "torch.softmax", "F.softmax", "Tensor.softmax",
        "torch.nn.Softmax", "torch._softmax", "torch.special.softmax", "torch.nn.functional.log_softmax",
        "liger_kernel", "quack",
    ) + SOFTMAX_CALLS,
    library_ops=SOFTMAX_OPS,
    task_files={"reference.py": HERE / "reference.py"},
    why_shapes="Attention-score and vocabulary rows: 4096/3072 columns, 32768 (long context), 128256 (Llama-3 vocabulary); 12000 rows is not a power of two.",
)
