"""Library kernels by what they compute: the ATen operators (base names, as the profiler records
them) whose dispatch during a kernel's call is a library passthrough (Operator.library_ops).

One library kernel computes another's contract on rearranged inputs: a layer norm, or a
training-mode batch norm, of [x, -x] is x's RMS norm; a width-1 convolution is a matrix product; a
masked softmax with nothing masked is the softmax. So an operator whose library work is one of a
family's counts the whole family as its library's (library_family), and a name torch adds to a
family's patterns fails tests/operators/test_library_ops.py until it is placed in one or set aside
there. An in-place variant (trailing "_") is the same kernel: the families hold base names, and the
watch looks for both (recorded_names)."""
from __future__ import annotations

import re

NORMALISATION_OPS = tuple("aten::" + n for n in (
    "rms_norm", "_fused_rms_norm", "layer_norm", "native_layer_norm", "group_norm", "native_group_norm",
    "instance_norm", "batch_norm", "native_batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "_batch_norm_impl_index",
    "_batch_norm_with_update", "_batch_norm_with_update_functional", "_batch_norm_no_update", "cudnn_batch_norm",
    "miopen_batch_norm", "quantized_batch_norm",
    # the pieces of a synchronised batch norm: per-channel statistics, and the normalisation by them
    "batch_norm_stats", "batch_norm_elemt", "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts",
    "batch_norm_update_stats",
))

SOFTMAX_OPS = tuple("aten::" + n for n in (
    "softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax", "special_softmax",
    "special_log_softmax", "_masked_softmax", "_sparse_softmax", "_sparse_log_softmax",
    "_nested_tensor_softmax_with_shape",
))

MATMUL_OPS = tuple("aten::" + n for n in (
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "einsum", "tensordot", "bilinear", "_trilinear",
    "mv", "addmv", "dot", "vdot", "linalg_vecdot", "linalg_matmul", "linalg_multi_dot", "chain_matmul",
    "_addmm_activation", "_int_mm", "_mixed_dtypes_linear", "_scaled_mm", "_scaled_mm_v2", "_grouped_mm",
    "_scaled_grouped_mm", "_scaled_grouped_mm_v2", "_foreach_mm", "_weight_int8pack_mm", "_weight_int4pack_mm",
    "_weight_int4pack_mm_for_cpu", "_weight_int4pack_mm_with_scales_and_zeros", "_dyn_quant_matmul_4bit",
    "mkldnn_linear", "_wrapped_quantized_linear_prepacked", "fbgemm_linear_fp16_weight", "fbgemm_linear_fp16_weight_fp32_activation",
    "fbgemm_linear_int8_weight", "fbgemm_linear_int8_weight_fp32_activation",
    "_sparse_mm", "_sparse_addmm", "sspaddmm", "hspmm", "smm", "sparse_sampled_addmm", "_sparse_sparse_matmul",
    "_sparse_mm_reduce_impl", "_sparse_semi_structured_linear", "_sparse_semi_structured_mm",
    "_sparse_semi_structured_addmm", "_cslt_sparse_mm",
    # a convolution of width 1 (or any width, over a Toeplitz layout) is a matrix product
    "convolution", "_convolution", "_convolution_mode", "convolution_overrideable", "conv1d", "conv2d", "conv3d",
    "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cudnn_convolution",
    "cudnn_convolution_relu", "cudnn_convolution_add_relu", "cudnn_convolution_transpose", "miopen_convolution",
    "miopen_convolution_transpose", "miopen_convolution_relu", "miopen_convolution_add_relu",
    "miopen_depthwise_convolution", "mkldnn_convolution", "_slow_conv2d_forward",
    "thnn_conv2d", "slow_conv3d", "slow_conv3d_forward", "slow_conv_dilated2d", "slow_conv_dilated3d",
    "slow_conv_transpose2d", "slow_conv_transpose3d", "_conv_depthwise2d", "conv_depthwise3d",
    "_nnpack_spatial_convolution", "_mps_convolution", "_mps_convolution_transpose",
))

ATTENTION_OPS = tuple("aten::" + n for n in (
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_attention_math", "_scaled_dot_product_attention_math_for_mps",
    "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward",
    "_flash_attention_forward_no_dropout_inplace", "_efficient_attention_forward", "_cudnn_attention_forward",
    "_native_multi_head_attention", "_triton_multi_head_attention", "_triton_scaled_dot_attention",
    "_transformer_encoder_layer_fwd",
))

FAMILIES = (NORMALISATION_OPS, SOFTMAX_OPS, MATMUL_OPS, ATTENTION_OPS)

# The kernel libraries the operators are timed against (or whose kernels compute their contracts),
# as import packages: a candidate's sandbox does not show them and its guard refuses their import
# (_kit, _guard), so a name the static scan cannot read (importlib of a computed name) finds
# nothing; every package an operator's library_calls names is one of them
# (tests/operators/test_library_ops.py).
KERNEL_LIBRARIES = ("apex", "flash_attn", "flashinfer", "liger_kernel", "megablocks", "quack", "transformers", "vllm",
                    "xformers")

# Calls of other array libraries that reach the same vendor kernels with no ATen operator
# dispatched (CuPy's matmul is cuBLAS's GEMM, NumPy's the CPU's BLAS): the run-time watch cannot
# see them, so the static scan looks for them (Operator.library_calls; a computed name passes it).
MATMUL_CALLS = tuple(f"{lib}.{fn}" for lib in ("numpy", "cupy") for fn in (
    "matmul", "dot", "vdot", "inner", "einsum", "tensordot", "linalg")) + (
    "cupy.cublas", "cupy.cuda.cublas", "cupy_backends.cuda.libs.cublas", "cupy.cutensor", "cupyx.cutensor",
    "cupyx.cusparse", "cupyx.scipy.linalg", "scipy.linalg")
SOFTMAX_CALLS = tuple(f"{lib}.special.{fn}" for lib in ("scipy", "cupyx.scipy") for fn in ("softmax", "log_softmax"))


# The device kernels of each family's vendor libraries, by their names' stems (kernel_stem): a
# library kernel run on a shape or in a precision the libraries were not timed on is still the
# library's (cuBLAS picks its kernel by shape and dtype; a captured graph replays any of them). Each
# stem is C++-namespaced or in a vendor's own naming scheme, never a name a kernel written in Python
# (Triton) or as extern "C" source (CuPy) is given by plain choice, so an honest kernel does not
# match; tests/operators/test_library_ops.py holds real names of both sides.
FAMILY_KERNELS = {
    NORMALISATION_OPS: ("ATen's or cuDNN's normalisation", r"^cudnn::.*(?:bn_|[Nn]orm)|^at::native::.*(?:layer_?norm|LayerNorm|rms_?norm|"
                        r"RmsNorm|RMSNorm|RowwiseMoments|batch_norm|BatchNorm|group_?norm|GroupNorm|ComputeFusedParams)"),
    SOFTMAX_OPS: ("ATen's softmax", r"^at::native::.*(?:SoftMax|[Ss]oftmax)|^anon::softmax_warp_"),
    MATMUL_OPS: ("cuBLAS's or cuDNN's matrix product", r"^cudnn::.*(?:conv|gemm)|^nvjet_|^xmma_|^sm\d+_xmma_|cublas|"
                 r"^(?:maxwell|volta|turing|ampere|hopper|blackwell|sm\d+)_\w*(?:gemm|fprop|dgrad|wgrad)|"
                 r"^cutlass_\d+_\w*gemm|^gemv2[NT]_kernel|^gemvx|^gemvNSP|^gemmSN_|^gemmk1_kernel$|^splitKreduce_kernel$|"
                 r"implicit_convolve"),
    ATTENTION_OPS: ("a flash, memory-efficient or cuDNN attention", r"^cudnn.*(?:sdpa|fmha|attn|flash)|^pytorch_flash::|^flash::|^flashinfer::|"
                    r"PyTorchMemEffAttention|^fmha_cutlass"),
}


def kernel_stem(kernel: str) -> str:
    """A device kernel's name without its return type, template arguments and parameters, with an
    anonymous namespace as "anon": what every instantiation of one kernel shares ("void
    at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<c10::BFloat16, ...>(...)" ->
    "at::native::anon::cunn_SoftMaxForwardReg")."""
    name = re.sub(r"^(?:void|__global__)\s+", "", kernel.replace("(anonymous namespace)", "anon").strip())
    return re.split(r"[<(]", name, maxsplit=1)[0].strip()


def vendor_kernels(ops) -> tuple[str, re.Pattern] | None:
    """(what they are, the stems' pattern) of the device kernels of the vendor libraries of every
    family in `ops` (None: no family's): one of them run by a candidate is a library passthrough."""
    found = [FAMILY_KERNELS[f] for f in FAMILIES if set(ops) & set(f)]
    if not found:
        return None
    return " or ".join(what for what, _ in found) + " kernel", re.compile("|".join(f"(?:{p})" for _, p in found))


def base_name(name: str) -> str:
    """An operator's name with an in-place variant's trailing "_" taken off ("aten::addmm_" is
    aten::addmm's kernel writing into its first argument); dunder names ("aten::__and__") kept."""
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def recorded_names(ops) -> frozenset[str]:
    """Every name the profiler records for `ops`' kernels: each base name and its in-place variant
    (`Tensor.addmm_` records aten::addmm_, aten::addmm's kernel writing into its first argument)."""
    return frozenset(n for op in ops for n in (op, op + "_"))


def library_family(*ops: str) -> tuple[str, ...]:
    """`ops` and every family one of them belongs to, each name once, in a stable order."""
    names = dict.fromkeys(ops)
    for family in FAMILIES:
        if names.keys() & set(family):
            names.update(dict.fromkeys(family))
    return tuple(names)


__all__ = ["ATTENTION_OPS", "FAMILIES", "FAMILY_KERNELS", "KERNEL_LIBRARIES", "MATMUL_CALLS", "MATMUL_OPS", "NORMALISATION_OPS",
           "SOFTMAX_CALLS", "SOFTMAX_OPS", "base_name", "kernel_stem", "library_family", "recorded_names", "vendor_kernels"]
