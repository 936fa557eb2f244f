"""The device memory backend: GPU buffers in the one call path (_allreduce).

Stream semantics are mpi4py's: the caller has synchronized the device before the
call; when the call returns the result is complete in the receive buffer.

``route`` says how a call with a device buffer runs:
- "device": MPI is CUDA-aware, both buffers are on the device and a kernel exists
  for (dtype, op).  MPI gets device pointers (phase 1, the plan's messages); the
  plan's REDUCE rows are Numba kernels and its COPY rows device copies, queued on
  the call's stream (``Local``) and synchronised before the next round's messages
  are posted (a send may read what a kernel wrote; a receive may land where a
  kernel still reads) and before the call returns;
- "staged": anything else (no CUDA-aware MPI, one buffer on the host, no kernel):
  the plan runs in pinned host memory (_staged).

Scratch (device and pinned) comes from the communicator's pools (_memory.Pool),
one buffer per operation in flight, so calls on different communicators from
different threads (on different GPUs too) never share memory.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..core.features import PAIR_TYPES
from . import cuda as _cuda
from . import kernels as _kernels
from . import host as _memory
from .buffers import is_in_place


def is_device_call(sendbuf, recvbuf) -> bool:
    """Whether either buffer spec of an ``Allreduce`` call is on a GPU (before any check:
    a malformed spec is the checks' business)."""
    return _cuda.is_device(_object(recvbuf)) or (
        not is_in_place(sendbuf) and _cuda.is_device(_object(sendbuf)))


def _object(spec):
    return spec[0] if isinstance(spec, (list, tuple)) and spec else spec


def route(src, out, op, needs_kernel=True) -> str:
    """"host", "device" or "staged" for a call on these Messages (see the docstring);
    ``needs_kernel``: whether the call reduces locally (every algorithm but native).

    Raises a clear error when device buffers cannot be handled here at all."""
    if src.memory == "host" and out.memory == "host":
        return "host"
    _need_numba()
    if src.memory == "host" or out.memory == "host" or not _cuda.cuda_aware()[0]:
        return "staged"
    return "device" if not needs_kernel or has_kernel(out.datatype, op) else "staged"


def _need_numba():
    try:
        _cuda.numba_cuda()
    except ImportError as exc:
        raise RuntimeError("stragglar_mpi: device buffers need Numba CUDA "
                           f"(pip install 'stragglar_mpi[cuda]'): {exc}") from None


def has_kernel(datatype, op) -> bool:
    """Whether a device kernel reduces (datatype, op)."""
    if not datatype.is_predefined or datatype.handle in PAIR_TYPES:
        return False
    try:
        dtype = np.dtype(datatype.tocode())
    except (ValueError, TypeError, KeyError):
        return False
    return _kernels.supports(dtype, _kernels.op_name(op))


class Local:
    """The interpreter's local operations on device memory (one stream per call).

    The interpreter calls ``reduce``/``copy`` for REDUCE/COPY rows and ``sync`` before
    it posts the messages of a round that follows local work; an exception raised
    here is kept in ``error`` and raised by the interpreter once its requests are
    cancelled."""

    def __init__(self, datatype, op):
        self.stream = _cuda.numba_cuda().stream()
        self.dtype = np.dtype(datatype.tocode())
        self.opname = _kernels.op_name(op)
        self.error = None

    def reduce(self, a, b, count):
        """``b = a (op) b``, ``count`` elements at device addresses ``a`` and ``b``."""
        nbytes = count * self.dtype.itemsize
        va = _cuda.device_bytes(a, nbytes).view(self.dtype)
        vb = _cuda.device_bytes(b, nbytes).view(self.dtype)
        _kernels.reduce(va, vb, self.opname, self.stream)

    def copy(self, a, b, nbytes):
        """``nbytes`` from device address ``a`` to ``b``."""
        if nbytes:
            _cuda.device_bytes(b, nbytes).copy_to_device(_cuda.device_bytes(a, nbytes), stream=self.stream)

    def sync(self):
        self.stream.synchronize()


class _Device:
    """Device memory: Numba kernels and copies, device scratch per communicator."""

    name = "device"

    def scratch(self, lease, nbytes):
        return _memory.address(lease.take("device", nbytes))

    def copy(self, dst, src, nbytes):
        if nbytes:
            local = Local(MPI.BYTE, MPI.SUM)
            local.copy(src, dst, nbytes)
            local.sync()

    def local(self, datatype, op):
        return Local(datatype, op)

    def lease(self, state):
        return _memory.Lease(state, _pool)


_MAKE = {"device": lambda n: _cuda.device_scratch(n), "pinned": lambda n: _cuda.pinned(n)}


def _pool(state, kind):
    return _memory.pool(state, kind, _MAKE[kind])


DEVICE = _Device()


# --- copies between a host buffer and a Message in any memory, on a stream -----------------
def to_host(host_address, msg, offset, nbytes, stream):
    """Queue ``nbytes`` of ``msg`` from byte ``offset`` into host memory (a host ``msg``:
    copied at once)."""
    _between(host_address, msg, offset, nbytes, stream, True)


def from_host(host_address, msg, offset, nbytes, stream):
    """Queue ``nbytes`` from host memory into ``msg`` at byte ``offset``."""
    _between(host_address, msg, offset, nbytes, stream, False)


def _between(host_address, msg, offset, nbytes, stream, to_host_side):
    """One copy, in pieces of at most STRAGGLAR_CUDA_PIECE_BYTES."""
    step = _cuda.piece_bytes()
    for at in range(0, nbytes, step):
        _piece(host_address + at, msg, offset + at, min(step, nbytes - at), stream, to_host_side)


def _piece(host_address, msg, offset, nbytes, stream, to_host_side):
    host = np.frombuffer(MPI.buffer.fromaddress(host_address, nbytes), np.uint8)
    if msg.memory == "host":    # the host side of a mixed call
        other = np.frombuffer(MPI.buffer.fromaddress(msg.address + offset, nbytes), np.uint8)
        src, dst = (other, host) if to_host_side else (host, other)
        dst[:] = src
        return
    view = _cuda.device_bytes(msg.address + offset, nbytes)
    if to_host_side:
        view.copy_to_host(host, stream=stream)
    else:
        view.copy_to_device(host, stream=stream)


def stream():
    return _cuda.numba_cuda().stream()


def event(on):
    """An event recorded on stream ``on`` (its ``synchronize`` waits for what came before)."""
    mark = _cuda.numba_cuda().event()
    mark.record(on)
    return mark

