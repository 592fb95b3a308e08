"""What an output must be (a plain dense tensor, apart from the inputs), and tensors to sealed
memfds (see _channel). Used by the candidate and the judge alike.

Every torch callable used here is captured at import as the C-level function, so code that runs
later in the same process (a submission) cannot change what these functions do by replacing a
torch attribute."""
from __future__ import annotations

import torch

from ablate.evaluate import _channel

_Tensor = torch.Tensor  # captured: the exact class outputs must have
_TB = torch._C.TensorBase
_SCALARS = (int, float, bool)
_strided = torch.strided
_uint8 = torch.uint8
_empty = torch.empty
_detach, _contig, _reshape, _view = _TB.detach, _TB.contiguous, _TB.reshape, _TB.view
_copy, _numpy, _numel, _esize = _TB.copy_, _TB.numpy, _TB.numel, _TB.element_size
_storage = _TB.untyped_storage
_STAGE: list = []  # a pinned host buffer for device-to-host copies, grown as needed


def as_list(out) -> list | None:
    """The outputs as a list of plain tensors (Python numbers allowed beside them in a tuple,
    for references that return one), or None when `out` is anything else."""
    if type(out) is _Tensor:
        return [out]
    if type(out) in (tuple, list) and any(type(t) is _Tensor for t in out) \
            and all(type(t) is _Tensor or type(t) in _SCALARS for t in out):
        return list(out)
    return None


def layout_problem(t: torch.Tensor) -> str | None:
    """Why `t` is not a plain, dense, materialised tensor; None when it is."""
    if t.layout != _strided:
        return f"layout {t.layout}"
    if t.is_conj() or t.is_neg():
        return "a lazy conjugate/negative view"
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return f"strides {tuple(t.stride())} for shape {tuple(t.shape)} overlap or leave gaps"
        expected *= sz
    return None


def _span(t: torch.Tensor) -> tuple[int, int]:
    s = _storage(t)
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def aliases(outputs: list, inputs) -> bool:
    spans = [_span(t) for t in inputs if isinstance(t, _Tensor) and _storage(t).nbytes()]
    for o in outputs:
        if not isinstance(o, _Tensor):
            continue
        lo, hi = _span(o)
        if hi > lo and any(lo < b and a < hi for a, b in spans):
            return True
    return False


def _host_bytes(t: torch.Tensor):
    """A host byte view of t's contents: device tensors go through a pinned buffer (one DMA)."""
    n = _numel(t) * _esize(t)
    flat = _view(_reshape(_contig(_detach(t)), (-1,)), _uint8)
    if flat.device.type == "cpu":
        return _numpy(flat)
    if not _STAGE or _numel(_STAGE[0]) < n:
        _STAGE[:] = [_empty(n, dtype=_uint8, pin_memory=True)]
    host = _STAGE[0][:n]
    _copy(host, flat)
    return _numpy(host)


def to_sealed(name: str, items) -> tuple[int, list[dict]]:
    """(memfd, entries) holding `items` (tensors and Python numbers), sealed. One tensor at a time
    passes through the staging buffer, so host memory holds one copy."""
    entries, _ = _channel.layout(items)
    tensors = [t for t in items if isinstance(t, _Tensor)]
    return _channel.write_sealed(name, (_host_bytes(t) for t in tensors if _numel(t))), entries
