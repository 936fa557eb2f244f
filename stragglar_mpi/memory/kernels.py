"""Elementwise reduction kernels on the device: ``b[i] = a[i] (op) b[i]``.

The operand order is that of ``MPI_Reduce_local(a, b)``.  One kernel per (dtype, op),
compiled by Numba on first use and cached.  ``supports`` says which pairs exist;
every other pair (long double, pair types, user-defined ops, ...) is reduced on the
host after staging.
"""
from __future__ import annotations

import threading
from functools import lru_cache

import numpy as np

from . import cuda as _cuda

INTS = tuple(dict.fromkeys(np.dtype(c) for c in "bBhHiIlLqQ"))  # l and q may coincide
FLOATS = tuple(np.dtype(c) for c in "efd")
COMPLEX = tuple(np.dtype(c) for c in "FD")
BOOL = np.dtype("?")


# b[i] = x (op) y with x = a[i], y = b[i]; the expression is pasted into the kernel
# (no device-function call), so each kernel compiles on its own, even ahead of time.
_MAX, _MIN = "x if x > y else y", "x if x < y else y"
OPS = {
    "SUM": ("x + y", INTS + FLOATS + COMPLEX),
    "PROD": ("x * y", INTS + FLOATS + COMPLEX),
    "MAX": (_MAX, INTS + FLOATS),
    "MIN": (_MIN, INTS + FLOATS),
    "LAND": ("(x != 0) & (y != 0)", INTS + (BOOL,)),
    "LOR": ("(x != 0) | (y != 0)", INTS + (BOOL,)),
    "LXOR": ("(x != 0) != (y != 0)", INTS + (BOOL,)),
    "BAND": ("x & y", INTS),
    "BOR": ("x | y", INTS),
    "BXOR": ("x ^ y", INTS),
}

_TEMPLATE = """
def reduce_into(a, b):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < b.size:
        x = a[i]
        y = b[i]
        b[i] = {expr}
        i += step
"""


def op_name(op):
    """"SUM", "MAX", ... for a predefined mpi4py Op that has kernels, else None."""
    from mpi4py import MPI
    for name in OPS:
        if op == getattr(MPI, name):
            return name
    return None


def supports(dtype, opname) -> bool:
    return opname in OPS and np.dtype(dtype) in OPS[opname][1]


def signature(dtype):
    """The Numba signature ``void(T[::1], T[::1])`` of the kernel for ``dtype``."""
    import numba
    array = numba.types.Array(numba.from_dtype(np.dtype(dtype)), 1, "C")
    return numba.types.void(array, array)


def make(opname):
    """The kernel's Python function for ``opname`` (not yet compiled)."""
    scope = {"cuda": _cuda.numba_cuda()}
    exec(_TEMPLATE.format(expr=OPS[opname][0]), scope)
    return scope["reduce_into"]


@lru_cache(maxsize=None)
def kernel(dtype, opname):
    """The compiled kernel for (dtype, op); ``supports`` must hold."""
    return _cuda.numba_cuda().jit(signature(dtype))(make(opname))


THREADS = 256


@lru_cache(maxsize=1)
def _max_blocks():
    return _cuda.numba_cuda().get_current_device().MULTIPROCESSOR_COUNT * 32


_SIMULATED = threading.Lock()   # the simulator swaps a kernel's globals while it runs


def reduce(a, b, opname, stream):
    """``b = a (op) b`` on device arrays of one dtype, queued on ``stream``."""
    n = b.size
    if n == 0:
        return
    if _cuda.simulated():
        with _SIMULATED:
            kernel(b.dtype, opname)[1, min(n, 32), stream](a, b)
        return
    blocks = min(_max_blocks(), -(-n // THREADS))
    kernel(b.dtype, opname)[blocks, THREADS, stream](a, b)
