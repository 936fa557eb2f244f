"""CUDA plumbing: which buffers live on a GPU, whether MPI is CUDA-aware, device views.

Numba is imported lazily (only for a device buffer or ``info``), so host calls
never pay for it.  A buffer counts as a device buffer when its memory is device
(or managed) memory according to the CUDA driver, or when it is an array of the
Numba CUDA simulator (whose "device" memory is host memory).  Objects that expose
``__cuda_array_interface__`` or CUDA DLPack over host memory are host buffers.

Its settings (STRAGGLAR_CUDA_AWARE, STRAGGLAR_CUDA_PIECE_BYTES) are read with all the
others by ``_config``.
"""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..core import config as _config

_HOST_TYPES = (np.ndarray, bytes, bytearray, memoryview)
_DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 2, 3, 13
_DL_KINDS = {0: "i", 1: "u", 2: "f", 5: "c"}


@dataclass(frozen=True)
class DeviceArray:
    """Where a device array lives and how it is laid out (strides in bytes)."""
    ptr: int
    shape: tuple
    strides: tuple
    dtype: np.dtype
    readonly: bool
    obj: object
    simulated: bool
    memory: str = "device"     # or "managed" (the driver's answer)

    def standin(self):
        """A host array of the same layout, so validation raises what host input raises."""
        if self.simulated:
            return self.obj._ary
        size = self.dtype.itemsize
        low = sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s < 0 and n)
        high = sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s > 0 and n)
        base = np.empty(high - low + size, np.uint8)  # never touched: pages stay unmapped
        view = np.ndarray(self.shape, self.dtype, base, -low, self.strides)
        view.flags.writeable = not self.readonly
        return view


def is_device(obj) -> bool:
    """Whether ``obj`` is an array in device memory (cheap for host objects)."""
    return describe_device(obj) is not None


def describe_device(obj):
    """``describe(obj)``, answered at once for host objects (the usual case)."""
    if isinstance(obj, _HOST_TYPES) or obj is None:
        return None
    return describe(obj)


def describe(obj):
    """The ``DeviceArray`` of a device buffer, or None for anything else."""
    if _is_simulator_array(obj):
        ary = obj._ary
        return DeviceArray(ary.ctypes.data, ary.shape, ary.strides, ary.dtype,
                           not ary.flags.writeable, obj, True)
    cai = getattr(obj, "__cuda_array_interface__", None)
    desc = _from_cai(obj, cai) if cai is not None else _from_dlpack(obj)
    kind = memory_kind(desc.ptr) if desc is not None and desc.ptr else "host"
    return None if kind == "host" else replace(desc, memory=kind)


def _is_simulator_array(obj) -> bool:
    cls = type(obj)
    return (cls.__name__ == "FakeCUDAArray" and "numba" in sys.modules
            and cls.__module__.endswith("simulator.cudadrv.devicearray"))


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _from_cai(obj, cai):
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides") or _c_strides(shape, dtype.itemsize)
    ptr, readonly = cai["data"]
    return DeviceArray(int(ptr or 0), shape, tuple(strides), dtype, bool(readonly), obj, False)


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _from_dlpack(obj):
    """Layout of a DLPack export on a CUDA device (the caller has synchronized)."""
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or device()[0] not in (_DL_CUDA, _DL_CUDA_MANAGED):
        return None
    try:
        capsule = obj.__dlpack__(stream=-1)
    except TypeError:
        capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(capsule, b"dltensor"))
    code = "?" if t.code == 6 else f"{_DL_KINDS.get(t.code, 'V')}{t.bits // 8}"
    dtype = np.dtype(code)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = (tuple(t.strides[i] * dtype.itemsize for i in range(t.ndim)) if t.strides
               else _c_strides(shape, dtype.itemsize))
    return DeviceArray((t.data or 0) + t.byte_offset, shape, strides, dtype, False, obj, False)


# --- where memory lives: the CUDA driver, through ctypes ---------------------------------
_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, _CU_MEMORYTYPE_HOST = 2, 1
_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
_CUDA_ERROR_INVALID_VALUE = 1


@lru_cache(maxsize=1)
def _libcuda():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if lib.cuInit(0) != 0:
        return None
    lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    return lib


def memory_kind(ptr: int) -> str:
    """"device", "managed" or "host" (pageable, pinned, or no CUDA at all)."""
    lib = _libcuda()
    if lib is None:
        return "host"
    kind = ctypes.c_uint(0)
    err = lib.cuPointerGetAttribute(ctypes.byref(kind), _CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
    if err not in (0, _CUDA_ERROR_INVALID_VALUE):
        numba_cuda().current_context()  # the query needs a context on some drivers
        err = lib.cuPointerGetAttribute(ctypes.byref(kind), _CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
    if err != 0 or kind.value == _CU_MEMORYTYPE_HOST:
        return "host"
    managed = ctypes.c_uint(0)
    err = lib.cuPointerGetAttribute(ctypes.byref(managed), _CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr)
    return "managed" if err == 0 and managed.value else "device"


# --- CUDA-aware MPI ----------------------------------------------------------------------
def cuda_aware():
    """(whether MPI takes device pointers, where that answer comes from)."""
    forced = _config.current().cuda_aware
    if forced is not None:
        return forced, "STRAGGLAR_CUDA_AWARE"
    return _query_mpi()


@lru_cache(maxsize=1)
def _query_mpi():
    from mpi4py import MPI  # noqa: F401  (MPI must be initialized before the query)
    lib = _libmpi()
    if lib is None:
        return False, "libmpi not found"
    if hasattr(lib, "MPIX_GPU_query_support"):  # MPICH
        flag = ctypes.c_int(0)
        lib.MPIX_GPU_query_support.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        if lib.MPIX_GPU_query_support(0, ctypes.byref(flag)) == 0:  # MPIX_GPU_SUPPORT_CUDA
            return bool(flag.value), "MPIX_GPU_query_support"
    if hasattr(lib, "MPIX_Query_cuda_support"):  # Open MPI
        return bool(lib.MPIX_Query_cuda_support()), "MPIX_Query_cuda_support"
    return False, "no MPIX query in the MPI library"


def _libmpi():
    """The libmpi that mpi4py loaded (it may not be in the global namespace)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libmpi" in line}
    except OSError:
        paths = set()
    for path in sorted(paths):
        if os.path.basename(path).startswith("libmpi.so"):
            return ctypes.CDLL(path)
    try:
        return ctypes.CDLL(None) if hasattr(ctypes.CDLL(None), "MPI_Init") else None
    except OSError:
        return None


def piece_bytes() -> int:
    return _config.current().cuda_piece_bytes


# --- Numba: device views, pinned memory ---------------------------------------------------
def numba_cuda():
    from numba import cuda
    return cuda


def simulated() -> bool:
    import numba
    return bool(numba.config.ENABLE_CUDASIM)


def device_bytes(address: int, nbytes: int, owner=None):
    """A flat uint8 Numba device array over ``nbytes`` at device ``address``."""
    cuda = numba_cuda()
    if simulated():
        from mpi4py import MPI
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        host = np.frombuffer(MPI.buffer.fromaddress(address, nbytes), np.uint8) if nbytes else \
            np.empty(0, np.uint8)
        return FakeCUDAArray(host)
    cai = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False), "version": 3, "strides": None}
    return cuda.from_cuda_array_interface(cai, owner=owner, sync=False)


def pinned(nbytes: int):
    """A new pinned host buffer (uint8) of ``nbytes`` (at least one byte)."""
    return numba_cuda().pinned_array(max(nbytes, 1), np.uint8)


def device_scratch(nbytes: int):
    """A new device buffer (uint8) of ``nbytes`` (at least one byte), on the current device."""
    return numba_cuda().device_array(max(nbytes, 1), np.uint8)


def info() -> dict:
    """What ``python -m stragglar_mpi info`` shows about CUDA."""
    try:
        import numba
        cuda = numba_cuda()
    except ImportError:
        return {"CUDA": "not available (install the [cuda] extra: numba-cuda)"}
    aware, source = cuda_aware()
    if simulated():
        devices = "Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    elif cuda.is_available():
        devices = ", ".join(d.name.decode() if isinstance(d.name, bytes) else str(d.name)
                            for d in cuda.gpus)
    else:
        devices = "none found"
    return {
        "CUDA": f"numba {numba.__version__}; devices: {devices}",
        "CUDA-aware MPI": f"{'yes' if aware else 'no'} ({source})",
        "GPU data path": "device pointers to MPI, Numba reduction kernels" if aware
        else f"staged through pinned host memory, pieces of {piece_bytes()} bytes",
    }
