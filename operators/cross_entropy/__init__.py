"""Cross-entropy loss forward over a large vocabulary (the LM head loss), bf16 logits."""
from pathlib import Path

import torch

from ablate.operators._baselines import compile_baselines, liger_unavailable, quack_unavailable
from ablate.operators._correctness import ContractRule
from ablate.operators._inputs import dtype_of, esize, generator, integers, tensor
from ablate.operators._library_ops import SOFTMAX_CALLS, library_family
from ablate.operators._operator import Baseline, Operator, load_module

HERE = Path(__file__).parent
_ref = load_module(HERE / "reference.py", "ablate.operators.cross_entropy.reference")


def make_inputs(shape, seed, device, dist):
    g = generator(seed, device)
    logits = tensor((shape["M"], shape["V"]), dist, g, dtype_of(shape), device)
    labels = integers((shape["M"],), 0, shape["V"], g, device)
    return logits, labels


def _bytes(shape):
    return esize(shape) * shape["M"] * shape["V"] + 8 * shape["M"] + 4


def _flops(shape):
    return 4 * shape["M"] * shape["V"]  # max, subtract, exp, sum per logit


def _f_cross_entropy(logits, labels):
    # Upcast first: on bf16 logits F.cross_entropy rounds its log-probabilities to bf16,
    # which is not the float32 contract.
    return torch.nn.functional.cross_entropy(logits.float(), labels)


def _liger(logits, labels):
    # The forward-only path: with logits.requires_grad False Liger skips writing the gradient
    # into the logits in place. Its per-row losses come back in the logits' dtype (bf16), so
    # the mean is taken in float32 here: it breaks FLOAT32_ROW_LOSSES, and the judge says so.
    from liger_kernel.ops.cross_entropy import cross_entropy_forward

    loss, *_ = cross_entropy_forward(logits, labels, None, -100, 0.0, 0.0, "none", None, False)
    return loss.float().mean()


def _quack(logits, labels):
    from quack.cross_entropy import cross_entropy_fwd

    return cross_entropy_fwd(logits, labels).mean()  # per-row float32 losses, forward only


def _equal_rows(inputs):
    """Every row the same (zeros, with c at its label), c chosen so that the per-row loss
    log(V - 1 + e**c) - c sits far from the bfloat16 grid: a loss rounded to bfloat16 before
    the mean is then off by ~2**-9 of it in every row alike, instead of averaging out."""
    logits, labels = inputs
    M, V = logits.shape
    c = torch.linspace(-8.0, 0.0, 2049, dtype=torch.float64).to(torch.bfloat16).unique().double()  # c <= 0: max 0
    loss = torch.log((V - 1) + torch.exp(c)) - c
    c = c[((loss.to(torch.bfloat16).double() - loss).abs() / loss).argmax()]
    probe = torch.zeros_like(logits)
    probe.scatter_(1, labels[:, None], float(c))
    return probe, labels


FLOAT32_ROW_LOSSES = ContractRule(
    "float32_row_losses", "each row's loss stays float32 until the mean", _equal_rows, limit=1e-4)

SMOKE = [
    {"M": 8, "V": 512, "dtype": "bfloat16"},
    {"M": 5, "V": 1000, "dtype": "bfloat16"},
    {"M": 4, "V": 5000, "dtype": "bfloat16"},
]
PUBLIC = [{"M": 8192, "V": 128256, "dtype": "bfloat16"}]
HIDDEN = [
    {"M": 4096, "V": 151936, "dtype": "bfloat16"},
    {"M": 16384, "V": 32000, "dtype": "bfloat16"},
    {"M": 3000, "V": 256000, "dtype": "bfloat16"},
]

OPERATOR = Operator(
    name="cross_entropy",
    goal=(
        "Implement the mean cross-entropy loss of bfloat16 logits [M, V] against int64 labels [M] "
        "(values in [0, V)): loss = mean over rows of (logsumexp(logits[i]) - logits[i, labels[i]]), "
        "accumulated in float32, returned as a 0-dimensional float32 tensor. Forward only: no "
        "gradient, no ignore_index, no label smoothing. V is a full LLM vocabulary (128256). "
        "reference.py holds the exact definition."
    ),
    reference=_ref.reference,
    make_inputs=make_inputs,
    shapes={"smoke": SMOKE, "public": PUBLIC, "eval": PUBLIC + HIDDEN},
    # One float32 number accumulated in float32: an honest order of summation stays within 1e-5
    # of it, a loss rounded to bfloat16 (2**-9) fails.
    tolerance={"bfloat16": 1e-4, "float16": 1e-4, "float32": 1e-5},
    bytes=_bytes,
    flops=_flops,
    baselines={
        "torch_eager": Baseline("torch_eager", _ref.reference),
        "torch_F.cross_entropy": Baseline("torch_F.cross_entropy", _f_cross_entropy),
        **compile_baselines(_ref.reference),
        # Stores its per-row losses in bfloat16 (liger 0.8.5): excluded by FLOAT32_ROW_LOSSES.
        "liger": Baseline("liger", _liger, liger_unavailable, needs_cuda=True),
        "quack": Baseline("quack", _quack, quack_unavailable, needs_cuda=True),
    },
    library_calls=(
        "torch.nn.functional.cross_entropy", "F.cross_entropy", "torch.nn.CrossEntropyLoss",
        "torch.nn.functional.nll_loss", "F.nll_loss", "torch.nn.functional.log_softmax",
        "F.log_softmax", "torch.log_softmax", "torch.logsumexp", "Tensor.logsumexp", "Tensor.log_softmax",
        "torch.special.logsumexp", "liger_kernel", "quack",
    ) + SOFTMAX_CALLS,
    library_ops=library_family(
        "aten::softmax", "aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss_forward",
        "aten::logsumexp",
    ),
    task_files={"reference.py": HERE / "reference.py"},
    contract_rules=(FLOAT32_ROW_LOSSES,),
    why_shapes="LM-head losses over real vocabularies: Llama-3 128256, Qwen 151936, Llama-2 32000, Gemma 256000, for 3000-16384 tokens.",
)
