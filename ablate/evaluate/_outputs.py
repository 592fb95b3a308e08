"""How a kernel's outputs cross from the candidate process to the judge: raw bytes in a file of
the evaluation directory (RAM-backed /dev/shm when there is room), each tensor at a 64-byte
aligned offset, described by entries sent on the nonce channel. The candidate copies from the
device into a pinned buffer and writes it out; the judge maps the file and copies to its
device. Cheaper than pickling both ways (torch.save/torch.load), and nothing the candidate
wrote is unpickled.

The entries are the candidate's word and the judge trusts none of it: the path must be the one
the driver writes, every dtype a torch dtype, every span inside the file and consistent with its
shape."""
from __future__ import annotations

import os

import torch

_ALIGN = 64
_Tensor = torch.Tensor
_from_file = torch.from_file
_uint8 = torch.uint8


_STAGE: list = []  # the candidate's pinned staging buffer, grown as needed


def _pinned(n: int) -> _Tensor:
    if not _STAGE or _STAGE[0].numel() < n:
        _STAGE[:] = [torch.empty(n, dtype=_uint8, pin_memory=True)]
    return _STAGE[0][:n]


def write(path: str, outs: list) -> list[dict]:
    """Write `outs` (tensors, or Python numbers beside them) to `path`; returns their entries.
    Device tensors go through a pinned buffer (a DMA copy) and one write call each: no page
    faults on fresh file pages, which cost more than the copy itself in a virtual machine."""
    entries, offset = [], 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for t in outs:
            if not isinstance(t, _Tensor):
                entries.append({"value": t})
                continue
            n = t.numel() * t.element_size()
            entries.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "offset": offset,
                            "nbytes": n})
            if n:
                src = t.detach().contiguous().reshape(-1).view(_uint8)
                if src.is_cuda:
                    host = _pinned(n)
                    host.copy_(src)
                else:
                    host = src
                view, done = memoryview(host.numpy()), 0
                while done < n:
                    done += os.pwrite(fd, view[done:], offset + done)
            offset += -(-n // _ALIGN) * _ALIGN
        os.ftruncate(fd, max(offset, 1))
    finally:
        os.close(fd)
    return entries


def read(path: str, entries, device: str) -> list:
    """The outputs written by write(), on `device`. Raises ValueError for anything malformed."""
    if not isinstance(entries, list) or len(entries) > 64:
        raise ValueError("output entries are not a list")
    size = os.path.getsize(path)
    buf = _from_file(path, shared=False, size=size, dtype=_uint8) if size else None
    outs = []
    for e in entries:
        if not isinstance(e, dict):
            raise ValueError(f"malformed output entry {e!r:.100}")
        if "value" in e:
            if type(e["value"]) not in (int, float, bool):
                raise ValueError(f"output value {e['value']!r:.100} is not a number")
            outs.append(e["value"])
            continue
        dtype = getattr(torch, str(e.get("dtype")), None)
        shape, start, n = e.get("shape"), e.get("offset"), e.get("nbytes")
        if not isinstance(dtype, torch.dtype) or not isinstance(shape, list) \
                or not all(type(d) is int and d >= 0 for d in shape) or type(start) is not int or type(n) is not int:
            raise ValueError(f"malformed output entry {e!r:.200}")
        numel = 1
        for d in shape:
            numel *= d
        if n != numel * dtype.itemsize or start < 0 or start % _ALIGN or start + n > size:
            raise ValueError(f"output entry {e!r:.200} does not fit the {size}-byte file")
        if numel == 0:
            outs.append(torch.empty(shape, dtype=dtype, device=device))
            continue
        outs.append(buf[start:start + n].view(dtype).view(shape).to(device, copy=True))
    return outs
