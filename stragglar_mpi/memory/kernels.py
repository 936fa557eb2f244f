"""Elementwise reduction kernels on the device: ``b[i] = a[i] (op) b[i]``, the operand
order of ``MPI_Reduce_local(a, b)``.

Every kernel gives MPICH's answer (that of ``MPI_Reduce_local`` and of the host loops,
cython_src/run/_reduce.pxi), NaN, +-inf and signed zeros included, so that an Allreduce
answers alike wherever its buffers live: MAX keeps b only where b > a (MIN where b < a),
so a NaN or an equal zero in a is taken; complex PROD is C's product, which recovers
infinities as C99 Annex G says, with no product fused into an FMA.  Only a NaN's sign
and payload may differ (a GPU gives the canonical NaN).  Open MPI's MAX/MIN of NaN and
signed zeros differ from MPICH's; MPI leaves them open.

One kernel per (dtype, op), compiled by Numba on first use and cached in the process.
``supports`` says which pairs have one; a call on any other pair (long double, pair
types, user-defined ops, ...) runs staged and MPI reduces it on the host, except with
``native`` and a CUDA-aware MPI, where MPI reduces in device memory (device.route).
"""
from __future__ import annotations

import math
import operator
import textwrap
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
# MAX and MIN are written as MPICH writes them (b[i] = b[i] > a[i] ? b[i] : a[i]).
_MAX, _MIN = "y if y > x else x", "y if y < x else x"
OPS = {
    "SUM": ("x + y", INTS + FLOATS + COMPLEX),
    "PROD": ("x * y", INTS + FLOATS + COMPLEX),   # complex: _COMPLEX_PROD
    "MAX": (_MAX, INTS + FLOATS),
    "MIN": (_MIN, INTS + FLOATS),
    "LAND": ("(x != 0) & (y != 0)", INTS + (BOOL,)),
    "LOR": ("(x != 0) | (y != 0)", INTS + (BOOL,)),
    "LXOR": ("(x != 0) != (y != 0)", INTS + (BOOL,)),
    "BAND": ("x & y", INTS),
    "BOR": ("x | y", INTS),
    "BXOR": ("x ^ y", INTS),
}

# x * y as C computes it for MPICH (GCC's __mulsc3, C99 Annex G): the textbook product;
# where both parts are NaN but a factor (or a product) is infinite, infinite factors
# become +-1 and the other parts +-0 (NaN parts of a finite factor +-0 too), and the
# product times inf is the answer.  ``mul`` is never fused into an FMA on a GPU, so
# finite products are the host's bit for bit; ``real`` is the type of the parts.
_COMPLEX_PROD = """
one, zero, inf = real(1), real(0), real(math.inf)
xr, xi, yr, yi = x.real, x.imag, y.real, y.imag
rr, ii, ri, ir = mul(xr, yr), mul(xi, yi), mul(xr, yi), mul(xi, yr)
re, im = rr - ii, ri + ir
if math.isnan(re) and math.isnan(im):
    x_inf = math.isinf(xr) or math.isinf(xi)
    y_inf = math.isinf(yr) or math.isinf(yi)
    if x_inf or y_inf or math.isinf(rr) or math.isinf(ii) or math.isinf(ri) or math.isinf(ir):
        if x_inf:
            xr = math.copysign(one if math.isinf(xr) else zero, xr)
            xi = math.copysign(one if math.isinf(xi) else zero, xi)
        else:
            xr = math.copysign(zero, xr) if math.isnan(xr) else xr
            xi = math.copysign(zero, xi) if math.isnan(xi) else xi
        if y_inf:
            yr = math.copysign(one if math.isinf(yr) else zero, yr)
            yi = math.copysign(one if math.isinf(yi) else zero, yi)
        else:
            yr = math.copysign(zero, yr) if math.isnan(yr) else yr
            yi = math.copysign(zero, yi) if math.isnan(yi) else yi
        re = inf * (mul(xr, yr) - mul(xi, yi))
        im = inf * (mul(xr, yi) + mul(xi, yr))
b[i] = complex(re, im)
"""

_TEMPLATE = """
def reduce_into(a, b):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < b.size:
        x = a[i]
        y = b[i]
{body}
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


def source(dtype, opname) -> str:
    """The kernel's Python source for (dtype, op)."""
    complex_prod = opname == "PROD" and np.dtype(dtype).kind == "c"
    body = _COMPLEX_PROD if complex_prod else f"b[i] = {OPS[opname][0]}"
    return _TEMPLATE.format(body=textwrap.indent(body.strip(), " " * 8))


def make(dtype, opname):
    """The kernel's Python function for (dtype, op) (not yet compiled)."""
    dtype = np.dtype(dtype)
    scope = {"cuda": _cuda.numba_cuda(), "math": math}
    if dtype.kind == "c":
        scope["real"] = np.finfo(dtype).dtype.type
        scope["mul"] = _unfused_mul(dtype)
    exec(source(dtype, opname), scope)
    return scope["reduce_into"]


def _unfused_mul(dtype):
    """Multiplication of the parts of ``dtype`` that NVVM never fuses into an FMA."""
    if _cuda.simulated():
        return operator.mul
    from numba.cuda import libdevice
    return libdevice.fmul_rn if dtype == np.complex64 else libdevice.dmul_rn


@lru_cache(maxsize=None)
def kernel(dtype, opname):
    """The compiled kernel for (dtype, op); ``supports`` must hold."""
    return _cuda.numba_cuda().jit(signature(dtype))(make(dtype, opname))


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
