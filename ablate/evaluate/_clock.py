"""The judge's clock on the device: three tiny kernels of the judge's own, in PTX loaded through the
driver, that read the GPU's global timer (%globaltimer, nanoseconds, one clock for every context
on the device).

  stamp(out)                     writes the timer to out[0]
  open(out, gate, value)         writes the timer to out[0], then `value` to the gate word a
                                 candidate's queued calls wait on: the start of a timed batch
  witness(out, ns, threshold)    one thread reads the timer for `ns` nanoseconds and writes
                                 (start, end, longest gap, gaps above threshold, their total)

Why a witness: contexts of different processes take turns on the device (time slices). While the
witness runs, any other context with work to do gets the device for a slice, and the witness sees
that as a gap between two reads of the timer. A witness longer than a slice, run right after a
batch (and its output snapshot) or right before the gate opens, therefore shows whether the
candidate's context still had, or already had, work of its own: work left running past the end of
a batch, or work started on the inputs before the start. A batch whose witnesses saw a gap is not
counted.
"""
from __future__ import annotations

import ctypes

from ablate.evaluate import _cuda

PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry ablate_stamp(.param .u64 out)
{
    .reg .u64 %rd<4>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u64 %rd3, %globaltimer;
    st.global.u64 [%rd2], %rd3;
    ret;
}

.visible .entry ablate_open(.param .u64 out, .param .u64 gate, .param .u32 value)
{
    .reg .u64 %rd<6>;
    .reg .u32 %r<2>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [gate];
    ld.param.u32 %r1, [value];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u64 %rd5, %globaltimer;
    st.global.u64 [%rd3], %rd5;
    membar.sys;
    st.volatile.global.u32 [%rd4], %r1;
    ret;
}

.visible .entry ablate_witness(.param .u64 out, .param .u64 duration, .param .u64 threshold)
{
    .reg .u64 %rd<16>;
    .reg .pred %p<3>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [duration];
    ld.param.u64 %rd3, [threshold];
    mov.u64 %rd4, %globaltimer;
    mov.u64 %rd5, %rd4;
    mov.u64 %rd6, 0;
    mov.u64 %rd7, 0;
    mov.u64 %rd8, 0;
LOOP:
    mov.u64 %rd9, %globaltimer;
    sub.u64 %rd10, %rd9, %rd5;
    max.u64 %rd6, %rd6, %rd10;
    setp.gt.u64 %p1, %rd10, %rd3;
    @%p1 add.u64 %rd7, %rd7, 1;
    @%p1 add.u64 %rd8, %rd8, %rd10;
    mov.u64 %rd5, %rd9;
    sub.u64 %rd11, %rd9, %rd4;
    setp.lt.u64 %p2, %rd11, %rd2;
    @%p2 bra LOOP;
    st.global.u64 [%rd1], %rd4;
    st.global.u64 [%rd1+8], %rd9;
    st.global.u64 [%rd1+16], %rd6;
    st.global.u64 [%rd1+24], %rd7;
    st.global.u64 [%rd1+32], %rd8;
    ret;
}
"""
WITNESS_WORDS = 5  # start, end, longest gap, gaps above threshold, their total (ns)


class Kernels:
    """The three kernels, loaded into the current context."""

    def __init__(self):
        lib = _cuda.lib()
        self.module = ctypes.c_void_p()
        _cuda.check(_cuda._fn("cuModuleLoadData")(ctypes.byref(self.module), ctypes.c_char_p(PTX.encode())),
                    "cuModuleLoadData")
        self.fns = {}
        for name in ("ablate_stamp", "ablate_open", "ablate_witness"):
            f = ctypes.c_void_p()
            _cuda.check(_cuda._fn("cuModuleGetFunction")(ctypes.byref(f), self.module, name.encode()),
                        f"cuModuleGetFunction({name})")
            self.fns[name] = f
        self._launch = lib.cuLaunchKernel
        self._launch.restype = ctypes.c_int

    def _run(self, name: str, stream: int, *args) -> None:
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
        _cuda.check(self._launch(self.fns[name], 1, 1, 1, 1, 1, 1, 0, ctypes.c_void_p(stream), params, None),
                    f"cuLaunchKernel({name})")

    def stamp(self, stream: int, out: int) -> None:
        self._run("ablate_stamp", stream, ctypes.c_uint64(out))

    def open(self, stream: int, out: int, gate: int, value: int) -> None:
        self._run("ablate_open", stream, ctypes.c_uint64(out), ctypes.c_uint64(gate), ctypes.c_uint32(value))

    def witness(self, stream: int, out: int, ns: int, threshold_ns: int) -> None:
        self._run("ablate_witness", stream, ctypes.c_uint64(out), ctypes.c_uint64(int(ns)),
                  ctypes.c_uint64(int(threshold_ns)))


def gaps(words) -> dict:
    """A witness's five words as a dict (nanoseconds)."""
    start, end, longest, count, total = (int(w) for w in words[:WITNESS_WORDS])
    return {"start": start, "end": end, "longest_gap_ns": longest, "gaps": count, "gap_ns": total}
