"""The library-kernel families (operators/_library_ops.py): every name is an operator of this
torch, and every ATen operator whose name says it normalises, takes a softmax, multiplies matrices,
convolves or attends is in a family or set aside here with its reason, so a kernel torch adds (a
new fused norm, a new GEMM entry) fails this test until someone places it."""
import re
from pathlib import Path

import pytest
import torch

from ablate import operators
from ablate.operators._library_ops import (
    ATTENTION_OPS, FAMILIES, MATMUL_OPS, NORMALISATION_OPS, SOFTMAX_OPS, base_name, kernel_stem, library_family,
    recorded_names, vendor_kernels,
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


# Device kernel names as torch 2.11's profiler recorded them on an H100 (benchmarks/results/
# h100-evaluator-17/probe2.log) or as each library names its kernels, with the family whose vendor
# libraries run them
VENDOR_KERNELS = [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", MATMUL_OPS),  # cuBLASLt, bf16 on Hopper
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     MATMUL_OPS),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", MATMUL_OPS),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8", MATMUL_OPS),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false, false>(float)",
     MATMUL_OPS),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>(int)",
     MATMUL_OPS),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", MATMUL_OPS),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__nv_bfloat16, float, float, 512, true, 1>(float)", NORMALISATION_OPS),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>(int, float)",
     NORMALISATION_OPS),
    ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, c10::BFloat16, float, float, int>(int)",
     NORMALISATION_OPS),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::BFloat16, float>(long, float)",
     NORMALISATION_OPS),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<c10::BFloat16, float, c10::BFloat16>(long)",
     SOFTMAX_OPS),
    ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>(int)",
     SOFTMAX_OPS),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t>, false, false, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
     ATTENTION_OPS),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", ATTENTION_OPS),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", ATTENTION_OPS),
]
# anyone's: the plain tensor work an honest kernel may run, and libraries launching outside ATen
ANYONES_KERNELS = [
    "Memset (Device)", "Memcpy DtoD (Device -> Device)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float>>(int)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::WelfordOps<float>>>(float)",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<c10::BFloat16, unsigned int, 2, 128, 1>(int)",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",  # torch.compile of a kernel's own code
    "_rms_norm_forward_kernel",  # Liger's Triton kernel: no operator launched it, its name is anyone's to choose
    # names Triton's tutorials and hand-written CUDA give kernels
    "matmul_kernel", "softmax_kernel", "_layer_norm_fwd_fused", "_attn_fwd_inner", "rms_norm_kernel", "gemm_kernel",
    "sgemm", "mma_tile", "flash_attention_kernel", "fused_softmax_kernel", "batchnorm_forward",
]


def _python_named_kernels() -> set[str]:
    """Every Triton kernel this project writes (the scripted templates, the test kernels) and every
    CuPy kernel's extern "C" name: the names honest kernels are given."""
    root = Path(__file__).parents[2]
    names = set()
    for path in [*(root / "harnesses").rglob("*.py"), *(root / "tests").rglob("*.py")]:
        text = path.read_text()
        names.update(re.findall(r"@triton\.jit[^\n]*\n(?:@[^\n]*\n)*def (\w+)", text))
        names.update(re.findall(r'extern "C" __global__ void (\w+)', text))
    return names


@pytest.mark.parametrize("kernel,family", VENDOR_KERNELS, ids=[k[:40] for k, _ in VENDOR_KERNELS])
def test_a_vendor_kernel_is_its_familys_and_no_other(kernel, family):
    for other in FAMILIES:
        assert bool(vendor_kernels(other)[1].search(kernel_stem(kernel))) == (other is family), (kernel, other[0])
    assert vendor_kernels(("aten::silu", "aten::topk")) is None  # operators of no family have no vendor's kernels


def test_no_honest_kernel_name_is_a_vendors():
    names = _python_named_kernels()
    assert {"rmsnorm", "_rmsnorm", "_attn_fwd"} <= names and len(names) > 20, sorted(names)  # the scan finds them
    every = vendor_kernels(tuple(n for family in FAMILIES for n in family))[1]
    assert [n for n in sorted(names) + ANYONES_KERNELS if every.search(kernel_stem(n))] == []


def test_a_kernels_stem_is_shared_by_its_instantiations():
    one, other = (f"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, {b}>"
                  f"(int, float, c10::BFloat16 const*)" for b in ("true", "false"))
    assert kernel_stem(one) == kernel_stem(other) == "at::native::anon::vectorized_layer_norm_kernel"
    assert kernel_stem("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT") == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
    assert kernel_stem("Memset (Device)") == "Memset"


def test_every_library_package_an_operator_names_is_hidden_from_candidates():
    from ablate.operators._library_ops import KERNEL_LIBRARIES

    named = {p for n in operators.names() for p in operators.get(n).library_calls if p.isidentifier()}
    assert named and named <= set(KERNEL_LIBRARIES), sorted(named - set(KERNEL_LIBRARIES))
