"""Memory the judge and a candidate share, and how each side reads it.

Slots (the judge's, the candidate maps them): input sets the judge writes and the kernel is called
on in place. On a GPU, device memory made shareable (_cuda.Shared); on a CPU, a memfd. A slot's
inputs are described by entries {dtype, shape, stride, offset, nbytes} (or {value} for a Python
number), offsets from the start of the shared buffer.

Outputs: on a GPU the kernel's outputs are born in the candidate's output pool (_pool), whose
segments the judge maps; on a CPU the driver copies each output's bytes (raw, no tensor method of
the candidate's reach) into a memfd the judge gave it. Either way an output is described by
{seg, offset, dtype, shape, stride, nbytes} and the judge reads it from its own mapping, checking
the description against the contract and the mapping's bounds first.

Also here, in the slots buffer's header: the gate word, which the judge's clock kernel sets to the
batch number when the batch may start, and the marker word, which the candidate's stream sets to
the batch number once the batch's calls are done and the judge's stream waits for (_clock).
"""
from __future__ import annotations

import mmap
import os

ALIGN = 256
HEADER = 256  # the gate word, the marker word and padding, before the first slot
MARKER = 64  # the marker word's offset in the header


class Malformed(ValueError):
    pass


def _dtype(name):
    import torch

    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise Malformed(f"not a dtype: {str(name)[:40]!r}")
    return dt


def span_elems(shape, stride) -> int:
    """Elements a strided tensor reaches from its first one (0 for an empty tensor)."""
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(shape, stride))


def dense(shape, stride) -> bool:
    """A dense, non-overlapping layout: some permutation of the dimensions is contiguous."""
    expected = 1
    for st, sz in sorted((st, sz) for st, sz in zip(stride, shape) if sz != 1):
        if st != expected:
            return False
        expected *= sz
    return True


def entry_of(t, offset: int) -> dict:
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "stride": list(t.stride()),
            "offset": offset, "nbytes": span_elems(t.shape, t.stride()) * t.element_size()}


def plan_slot(inputs) -> tuple[list[dict], int]:
    """Entries for one input set placed from offset 0, and the bytes the set takes."""
    import torch

    entries, off = [], 0
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            entries.append({"value": t})
            continue
        e = entry_of(t, off)
        entries.append(e)
        off += -(-e["nbytes"] // ALIGN) * ALIGN
    return entries, max(off, ALIGN)


def view(raw, e: dict, limit: int):
    """The tensor an entry describes, over `raw` (a uint8 tensor of `limit` bytes): checked."""
    import torch

    try:
        dtype = _dtype(e["dtype"])
        shape, stride, off, n = list(e["shape"]), list(e["stride"]), int(e["offset"]), int(e["nbytes"])
    except (KeyError, TypeError, ValueError) as err:
        raise Malformed(f"malformed entry {str(e)[:200]}: {err}") from None
    if len(shape) != len(stride) or len(shape) > 12 or any(type(d) is not int or d < 0 for d in shape + stride):
        raise Malformed(f"malformed shape or stride in {str(e)[:200]}")
    size = dtype.itemsize
    if n != span_elems(shape, stride) * size or off < 0 or off % size or off + n > limit:
        raise Malformed(f"entry {str(e)[:200]} does not fit its {limit}-byte buffer")
    if n == 0:
        return torch.empty_strided(shape, stride, dtype=dtype, device=raw.device)
    return raw[off:off + n].view(dtype).as_strided(shape, stride)


class Slots:
    """The judge's input slots for one shape: `count` slots of `slot_bytes` each after the header."""

    def __init__(self, device: str, count: int, slot_bytes: int):
        import torch

        self.device, self.count, self.slot_bytes = device, count, -(-slot_bytes // ALIGN) * ALIGN
        self.nbytes = HEADER + self.count * self.slot_bytes
        if device == "cuda":
            from ablate.evaluate import _cuda

            self.mem = _cuda.Shared.create(self.nbytes)
            self.raw = torch.as_tensor(_cuda.DeviceArray(self.mem.ptr, self.nbytes), device="cuda")
            self.fd = self.mem.take_fd()
            self.size = self.mem.size
        else:
            self.mem = None
            self.fd = os.memfd_create("slots", os.MFD_CLOEXEC)
            os.ftruncate(self.fd, self.nbytes)
            self.map = mmap.mmap(self.fd, self.nbytes)
            self.raw = torch.frombuffer(self.map, dtype=torch.uint8)
            self.size = self.nbytes
        self.raw[:HEADER].zero_()
        self.gate_ptr = self.raw.data_ptr()
        self.marker_ptr = self.gate_ptr + MARKER

    def base(self, k: int) -> int:
        return HEADER + k * self.slot_bytes

    def views(self, k: int, plan: list[dict]) -> list:
        """Slot k's inputs as they are now (views, not copies)."""
        return [e["value"] if "value" in e else view(self.raw, {**e, "offset": self.base(k) + e["offset"]}, self.nbytes)
                for e in plan]

    def place(self, k: int, inputs, plan: list[dict]) -> list:
        """Copy an input set into slot k; returns its views (what the candidate is called on)."""
        out = self.views(k, plan)
        for v, t in zip(out, inputs):
            if not isinstance(t, (int, float, bool)) and t is not None:
                v.copy_(t)
        return out

    def entries(self, k: int, plan: list[dict]) -> list[dict]:
        return [e if "value" in e else {**e, "offset": self.base(k) + e["offset"]} for e in plan]

    def take_fd(self) -> int:
        fd, self.fd = self.fd, None
        return fd

    def close(self) -> None:
        self.raw = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.mem is not None:
            self.mem.close()
            self.mem = None


class Segments:
    """The judge's mappings of a candidate's output memory: GPU pool segments by id, or the CPU
    output memfd as segment 0."""

    def __init__(self, device: str):
        self.device = device
        self.maps: dict[int, tuple] = {}  # id -> (raw uint8 tensor, size, owner)

    def add_gpu(self, sid: int, size: int, fd: int) -> None:
        import torch

        from ablate.evaluate import _cuda

        if sid in self.maps:
            os.close(fd)
            raise Malformed(f"segment {sid} sent twice")
        mem = _cuda.Shared.open(fd, size)
        self.maps[sid] = (torch.as_tensor(_cuda.DeviceArray(mem.ptr, mem.size), device="cuda"), mem.size, mem)

    def add_cpu(self, size: int) -> int:
        """A memfd of `size` bytes for the candidate to copy its outputs into (segment 0); returns
        the descriptor to send (the caller closes it)."""
        import torch

        fd = os.memfd_create("outputs", os.MFD_CLOEXEC)
        os.ftruncate(fd, max(size, 1))
        m = mmap.mmap(fd, max(size, 1))
        self.maps[0] = (torch.frombuffer(m, dtype=torch.uint8), max(size, 1), m)
        return fd

    def read(self, e: dict):
        """The output an entry describes, as a view of the judge's mapping (copy it before trusting
        it stays put)."""
        try:
            raw, size, _ = self.maps[int(e["seg"])]
        except (KeyError, TypeError, ValueError):
            raise Malformed(f"output in an unknown segment: {str(e)[:200]}") from None
        return view(raw, e, size)

    def outputs(self, rep: dict, expected: list) -> list | dict:
        """The outputs one call's report describes, copied out of these mappings, against the
        contract's [(shape or None for a number, dtype)]; or {reason: message} when they break it.
        A description the judge cannot read raises Malformed, never another error."""
        try:
            return self._outputs(rep, expected)
        except Malformed:
            raise
        except Exception as e:  # noqa: BLE001 (a field of the wrong kind, a view torch refuses: the peer's doing)
            raise Malformed(f"a call's outputs described as {str(rep)[:160]}: {type(e).__name__}: {e}") from None

    def _outputs(self, rep: dict, expected: list) -> list | dict:
        entries = rep.get("entries")
        if not isinstance(entries, list):
            raise Malformed("a call's outputs are not described")
        if len(entries) != len(expected):
            return {"wrong_shape": f"{len(entries)} outputs, expected {len(expected)}"}
        outs = []
        for e, (shp, dtype) in zip(entries, expected):
            if shp is None:
                if not isinstance(e, dict) or type(e.get("value")) not in (int, float, bool):
                    raise Malformed(f"a number output described as {str(e)[:100]}")
                outs.append(e["value"])
                continue
            if not isinstance(e, dict) or "value" in e:
                return {"wrong_shape": f"an output is {str(e)[:80]}, expected a tensor"}
            if e.get("shape") != shp:
                return {"wrong_shape": f"output shape {e.get('shape')}, expected {shp}"}
            if e.get("dtype") != dtype:
                return {"wrong_dtype": f"output dtype {e.get('dtype')}, expected {dtype}"}
            if not dense(e.get("shape") or [], e.get("stride") or []):
                return {"output_not_dense": f"strides {e.get('stride')} for shape {shp}"}
            outs.append(self.read(e).clone())
        return outs

    def close(self) -> None:
        for _, _, owner in self.maps.values():
            if hasattr(owner, "close"):
                try:
                    owner.close()
                except (BufferError, ValueError):
                    pass
        self.maps.clear()
