"""The library-kernel families (operators/_library_ops.py): every name is an operator of this
torch, and every ATen operator whose name says it normalises, takes a softmax, multiplies matrices,
convolves or attends is in a family or set aside here with its reason, so a kernel torch adds (a
new fused norm, a new GEMM entry) fails this test until someone places it."""
import re

import pytest
import torch

from ablate import operators
from ablate.operators._library_ops import (
    FAMILIES, MATMUL_OPS, NORMALISATION_OPS, SOFTMAX_OPS, base_name, library_family, recorded_names,
)

ATEN = sorted({base_name(n.split(".")[0]) for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")})
LOOKS_LIBRARY = re.compile(r"norm|softmax|mm|matmul|linear|conv|dot|einsum|attention|\bmv\b|addmv")
# matched by the pattern but not a forward kernel of any family's contract
SET_ASIDE_WORDS = re.compile(
    r"backward|_jvp"  # gradients
    r"|normal"  # random distributions
    r"|upsample"  # interpolation
    r"|gamma|hamming|cumm|dummy|_convert_indices"  # "mm" inside another word
)
SET_ASIDE = {"aten::" + n for n in (
    # vector and matrix norms: plain reductions (a kernel may use them as it may use a sum)
    "norm", "native_norm", "linalg_norm", "linalg_vector_norm", "linalg_matrix_norm", "frobenius_norm",
    "nuclear_norm", "norm_except_dim", "renorm", "embedding_renorm", "_foreach_norm", "_weight_norm",
    "_weight_norm_interface",
    # layout and packing of a weight for a later product, the choice of an attention kernel, a weighted
    # sum of matrices
    "mkldnn_reorder_conv2d_weight", "mkldnn_reorder_conv3d_weight", "fbgemm_pack_gemm_matrix_fp16",
    "fbgemm_pack_quantized_matrix", "fbgemm_linear_quantize_weight", "_wrapped_linear_prepack",
    "_convert_weight_to_int4pack", "_convert_weight_to_int4pack_for_cpu", "_cslt_sparse_mm_search",
    "_fused_sdp_choice", "_compute_linear_combination",
)}


def test_every_name_of_a_family_is_an_operator_of_this_torch():
    known = set(ATEN)
    for family in FAMILIES:
        missing = [n for n in family if n not in known]
        assert not missing, f"not ATen operators of torch {torch.__version__}: {missing}"


def test_every_operator_that_looks_like_library_work_is_placed():
    placed = set().union(*FAMILIES) | SET_ASIDE
    unplaced = [n for n in ATEN if LOOKS_LIBRARY.search(n[6:]) and n not in placed and not SET_ASIDE_WORDS.search(n)]
    assert not unplaced, f"place these in a family (operators/_library_ops.py) or set them aside here: {unplaced}"


def test_a_family_is_counted_whole_and_names_stay_in_order():
    assert library_family("aten::mm") == MATMUL_OPS
    assert set(library_family("aten::nll_loss", "aten::softmax")) == {"aten::nll_loss", *SOFTMAX_OPS}
    assert library_family("aten::relu") == ("aten::relu",)  # in no family: itself alone


def test_in_place_variants_are_the_same_kernels():
    assert base_name("aten::addmm_") == "aten::addmm" and base_name("aten::__and__") == "aten::__and__"
    assert recorded_names(["aten::addmm"]) == {"aten::addmm", "aten::addmm_"}


@pytest.mark.parametrize("name,family", [("rmsnorm", NORMALISATION_OPS), ("layernorm", NORMALISATION_OPS),
                                         ("softmax", SOFTMAX_OPS), ("gemm", MATMUL_OPS), ("grouped_gemm", MATMUL_OPS),
                                         ("attention", SOFTMAX_OPS + MATMUL_OPS), ("cross_entropy", SOFTMAX_OPS)])
def test_each_operator_counts_its_whole_family(name, family):
    assert set(family) <= set(operators.get(name).library_ops)
