"""Library passthrough the static scan cannot read and the guard cannot see: Liger's RMSNorm (a
Triton kernel launched outside ATen, under a name of its own) imported through importlib with a
computed name, which raises no audit event. A candidate's sandbox does not show the kernel
libraries, so there is nothing to import."""
import importlib


def kernel(x, weight):
    ops = importlib.import_module("lig" + "er_kernel.ops.rms_norm")
    return ops.LigerRMSNormFunction.apply(x, weight, 1e-6)
