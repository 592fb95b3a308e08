"""The few CUDA driver calls the judge's clock needs, through ctypes on libcuda (no extra package):
device memory one process allocates and another maps (virtual memory management with a POSIX file
descriptor as the shareable handle, passed over a Unix socket, so it crosses PID namespaces where
legacy CUDA IPC does not), host memory the device writes (a registered shared page), and the
stream memory operations (a stream that waits for a word to reach a value; a stream that writes a
word) that gate a queued batch of calls and mark its end without a kernel of either process
running meanwhile.

Every call raises CudaError with the driver's name for the failure. Callers must have a CUDA
context current on the calling thread (torch makes its primary context current once it has used
the device).
"""
from __future__ import annotations

import ctypes
import os

SUCCESS = 0
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02


class CudaError(RuntimeError):
    pass


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_lib = None


def lib():
    """libcuda, loaded once (CudaError when there is none: a machine without the driver)."""
    global _lib
    if _lib is None:
        try:
            _lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise CudaError(f"no CUDA driver library: {e}") from None
    return _lib


def _fn(*names):
    """The first of `names` the driver exports (the _v2 entry points where they exist)."""
    cuda = lib()
    for n in names:
        f = getattr(cuda, n, None)
        if f is not None:
            f.restype = ctypes.c_int
            return f
    raise CudaError(f"the CUDA driver exports none of {names}")


def check(res: int, what: str) -> None:
    if res != SUCCESS:
        name = ctypes.c_char_p()
        try:
            _fn("cuGetErrorName")(res, ctypes.byref(name))
        except CudaError:
            pass
        raise CudaError(f"{what} failed: {name.value.decode() if name.value else res}")


def device() -> int:
    dev = ctypes.c_int()
    check(_fn("cuCtxGetDevice")(ctypes.byref(dev)), "cuCtxGetDevice")
    return dev.value


def _prop(dev: int) -> _AllocationProp:
    p = _AllocationProp()
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE
    p.location.id = dev
    return p


def granularity(dev: int | None = None) -> int:
    dev = device() if dev is None else dev
    g = ctypes.c_size_t()
    p = _prop(dev)
    check(_fn("cuMemGetAllocationGranularity")(ctypes.byref(g), ctypes.byref(p),
                                               CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity")
    return g.value


def _map(handle: int, size: int, dev: int) -> int:
    """Reserve an address range, map the physical allocation there, make it readable and writable
    by the device; returns the device address."""
    ptr = ctypes.c_uint64()
    check(_fn("cuMemAddressReserve")(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                     ctypes.c_uint64(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
    try:
        check(_fn("cuMemMap")(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_ulonglong(handle),
                              ctypes.c_ulonglong(0)), "cuMemMap")
        access = _AccessDesc()
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = dev
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        check(_fn("cuMemSetAccess")(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
              "cuMemSetAccess")
    except CudaError:
        _fn("cuMemUnmap")(ptr, ctypes.c_size_t(size))
        _fn("cuMemAddressFree")(ptr, ctypes.c_size_t(size))
        raise
    return ptr.value


class Shared:
    """Device memory mapped in this process that another process can map too: created here
    (`Shared.create`) or imported from the other's file descriptor (`Shared.open`). `fd` is the
    shareable handle (created: ours to send, then close; opened: closed once mapped)."""

    def __init__(self, ptr: int, size: int, handle: int, fd: int | None):
        self.ptr, self.size, self.handle, self.fd = ptr, size, handle, fd
        self.created = fd is not None

    @classmethod
    def create(cls, nbytes: int) -> Shared:
        dev = device()
        g = granularity(dev)
        size = max(g, -(-nbytes // g) * g)
        handle = ctypes.c_ulonglong()
        p = _prop(dev)
        check(_fn("cuMemCreate")(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(p), ctypes.c_ulonglong(0)),
              "cuMemCreate")
        try:
            fd = ctypes.c_int(-1)
            check(_fn("cuMemExportToShareableHandle")(ctypes.byref(fd), handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                      ctypes.c_ulonglong(0)), "cuMemExportToShareableHandle")
            ptr = _map(handle.value, size, dev)
        except CudaError:
            _fn("cuMemRelease")(handle)
            raise
        return cls(ptr, size, handle.value, fd.value)

    @classmethod
    def open(cls, fd: int, size: int) -> Shared:
        """Map the allocation behind `fd` (of `size` bytes, as its creator said; the driver checks
        it against the allocation). The descriptor is closed once mapped."""
        dev = device()
        handle = ctypes.c_ulonglong()
        try:
            check(_fn("cuMemImportFromShareableHandle")(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  "cuMemImportFromShareableHandle")
        finally:
            os.close(fd)
        try:
            ptr = _map(handle.value, size, dev)
        except CudaError:
            _fn("cuMemRelease")(handle)
            raise
        return cls(ptr, size, handle.value, None)

    def take_fd(self) -> int:
        """A descriptor of the shareable handle, for the caller to send and close: the one made at
        creation, then one exported anew each time (a later shape's judge maps the allocation
        again). An imported allocation has none to give."""
        fd, self.fd = self.fd, None
        if fd is not None:
            return fd
        if not self.created:
            raise CudaError("an imported allocation's handle is its creator's to hand over")
        out = ctypes.c_int(-1)
        check(_fn("cuMemExportToShareableHandle")(ctypes.byref(out), ctypes.c_ulonglong(self.handle),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, ctypes.c_ulonglong(0)),
              "cuMemExportToShareableHandle")
        return out.value

    def close(self) -> None:
        if self.ptr:
            _fn("cuMemUnmap")(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.size))
            _fn("cuMemAddressFree")(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.size))
            _fn("cuMemRelease")(ctypes.c_ulonglong(self.handle))
            self.ptr = 0
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class HostWord:
    """A page of shared host memory (a memfd both processes map) registered with the device, so
    a stream can write a 32-bit word into it that the host then reads."""

    def __init__(self, buf, registered: bool):
        self.buf, self.registered = buf, registered
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        self.dptr = 0
        if registered:
            check(_fn("cuMemHostRegister_v2", "cuMemHostRegister")(ctypes.c_void_p(self.addr), ctypes.c_size_t(len(buf)),
                                                                   CU_MEMHOSTREGISTER_DEVICEMAP), "cuMemHostRegister")
            d = ctypes.c_uint64()
            check(_fn("cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer")(ctypes.byref(d),
                                                                                   ctypes.c_void_p(self.addr), 0),
                  "cuMemHostGetDevicePointer")
            self.dptr = d.value

    def read(self, offset: int = 0) -> int:
        return ctypes.c_uint32.from_address(self.addr + offset).value

    def write(self, value: int, offset: int = 0) -> None:
        ctypes.c_uint32.from_address(self.addr + offset).value = value

    def close(self) -> None:
        if self.registered:
            _fn("cuMemHostUnregister")(ctypes.c_void_p(self.addr))
            self.registered = False


def wait_value(stream: int, dptr: int, value: int) -> None:
    """Queue on `stream`: wait until the 32-bit word at device address dptr is >= value."""
    check(_fn("cuStreamWaitValue32_v2", "cuStreamWaitValue32")(ctypes.c_void_p(stream), ctypes.c_uint64(dptr),
                                                               ctypes.c_uint32(value), CU_STREAM_WAIT_VALUE_GEQ),
          "cuStreamWaitValue32")


def write_value(stream: int, dptr: int, value: int) -> None:
    """Queue on `stream`: write value to the 32-bit word at device address dptr (after the work
    queued before it)."""
    check(_fn("cuStreamWriteValue32_v2", "cuStreamWriteValue32")(ctypes.c_void_p(stream), ctypes.c_uint64(dptr),
                                                                 ctypes.c_uint32(value), CU_STREAM_WRITE_VALUE_DEFAULT),
          "cuStreamWriteValue32")


class DeviceArray:
    """`__cuda_array_interface__` over raw device bytes, for torch.as_tensor (no copy)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}
