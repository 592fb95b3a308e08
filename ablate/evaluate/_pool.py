"""Where a candidate's outputs are born on a GPU: a torch MemPool whose backing allocations are
shareable device memory (_cuda.Shared), so the judge maps the very memory a kernel wrote its
outputs into and reads them itself, with none of the candidate's code between the kernel's
return and the judge's read.

The driver runs each call inside `active()`; torch's caching allocator carves the call's
allocations out of the pool's segments, which it asks for through two ctypes callbacks. Each new
segment's file descriptor goes to each shape's judge once (`new_fds`, `send_again`). An output that is not inside the
pool (allocated on another thread, kept in a buffer of the kernel's own, a CUDA graph's memory)
is copied into the pool by the driver right after the call, on the call's stream: that copy is
part of the call's time.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools

from ablate.evaluate import _cuda

_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)


class OutputPool:
    def __init__(self):
        import torch

        self.torch = torch
        self.segments: dict[int, _cuda.Shared] = {}
        self.unsent: list[int] = []
        self.failed: str | None = None
        self._ids = itertools.count(1)
        self._alloc_cb, self._free_cb = _ALLOC(self._alloc), _FREE(self._free)  # kept alive with the pool
        self.allocator = torch._C._cuda_customAllocator(ctypes.cast(self._alloc_cb, ctypes.c_void_p).value,
                                                        ctypes.cast(self._free_cb, ctypes.c_void_p).value)
        self.pool = torch.cuda.MemPool(self.allocator)

    def _alloc(self, size, device, stream):
        try:
            seg = _cuda.Shared.create(int(size))
        except Exception as e:  # noqa: BLE001 (a callback must not raise: torch then reports out of memory)
            self.failed = f"{type(e).__name__}: {e}"
            return None
        sid = next(self._ids)
        self.segments[sid] = seg
        self.unsent.append(sid)
        return seg.ptr

    def _free(self, ptr, size, device, stream):
        for sid, seg in list(getattr(self, "segments", {}).items()):  # (at exit the pool may be half gone)
            if seg.ptr == ptr:
                del self.segments[sid]
                seg.close()
                return

    @contextlib.contextmanager
    def active(self):
        with self.torch.cuda.use_mem_pool(self.pool):
            yield

    def locate(self, ptr: int, nbytes: int) -> tuple[int, int] | None:
        """(segment id, offset) of the byte range [ptr, ptr + nbytes) when one segment holds it."""
        for sid, seg in self.segments.items():
            if seg.ptr <= ptr and ptr + nbytes <= seg.ptr + seg.size:
                return sid, ptr - seg.ptr
        return None

    def send_again(self) -> None:
        """A new shape's judge maps the outputs' memory afresh (the last one's maps ended with its
        shape), so every live segment goes again: one can outlive a shape (a buffer the kernel
        keeps, a library's cached workspace) and the next shape's outputs can land in it."""
        self.unsent = sorted(self.segments)

    def new_fds(self) -> list[tuple[int, int, int]]:
        """(segment id, size, file descriptor) of segments the judge has not been sent; the caller
        sends and closes the descriptors."""
        out = []
        for sid in self.unsent:
            if sid in self.segments:
                out.append((sid, self.segments[sid].size, self.segments[sid].take_fd()))
        self.unsent = []
        return out
