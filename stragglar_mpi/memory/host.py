"""Memory backends: where a call's buffers live, and the local work on them.

A call runs the same steps whatever its memory (_allreduce); a backend supplies
what differs:
- ``scratch``: memory for phase 1 and the plan, leased per call from the
  communicator's pool (``Pool``), never one buffer for the process;
- ``copy``: bytes from one address to another, complete on return;
- ``local``: the interpreter's table of local operations (REDUCE, COPY, and the
  synchronisation before a round's messages), or None for the host loops compiled
  into the interpreter.

``HOST`` is here; the device backend is ``_device.DEVICE``.
"""
from __future__ import annotations

import ctypes
import threading

from mpi4py import MPI

from ..core.lifetime import PROCESS



class Pool:
    """Scratch of one kind for one communicator: a buffer per operation in flight.

    ``take`` hands out a free buffer of at least ``nbytes`` (or makes one), ``give``
    returns it; a buffer of a call that failed is never returned (``keep``): MPI may
    still write into it."""

    def __init__(self, make):
        self._make, self._free, self._lock = make, [], threading.Lock()

    def take(self, nbytes):
        with self._lock:
            fits = [k for k, b in enumerate(self._free) if b.nbytes >= nbytes]
            if fits:
                return self._free.pop(min(fits, key=lambda k: self._free[k].nbytes))
            if self._free:              # a smaller one is replaced, not kept beside
                self._free.pop(0)
        return self._make(nbytes)

    def give(self, buf):
        with self._lock:
            self._free.append(buf)


def pool(state, kind, make):
    """The communicator's pool of ``kind`` ("pinned", "device"...), made on first use."""
    pools = state.pools
    found = pools.get(kind)
    if found is None:
        found = pools.setdefault(kind, Pool(make))
    return found


def address(buf) -> int:
    """The address of a host or device buffer the backends made."""
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is not None:
        return cai["data"][0]
    ary = getattr(buf, "_ary", buf)      # the Numba CUDA simulator's arrays wrap a host one
    return ary.ctypes.data


class Lease:
    """The scratch of one call: taken from the pools, given back when the call ends
    well, kept for good when it raises."""

    def __init__(self, state, pool_of):
        self.state, self._pool_of, self._taken = state, pool_of, []

    def take(self, kind, nbytes):
        """A buffer of ``kind`` of at least ``nbytes``, for the rest of the call."""
        owner = self._pool_of(self.state, kind)
        buf = owner.take(nbytes)
        self._taken.append((owner, buf))
        return buf

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        for owner, buf in self._taken:
            if exc is None:
                owner.give(buf)
            else:
                PROCESS.keep(buf)      # MPI may still write it: never freed
        self._taken.clear()
        return False


class _Host:
    """Host memory: the interpreter's compiled loops, memmove, the state's scratch."""

    name = "host"

    def scratch(self, lease, nbytes):
        """Address of ``nbytes`` of scratch (the communicator's one host buffer: calls
        on one communicator never overlap)."""
        return MPI.buffer(lease.state.scratch(nbytes)).address

    def copy(self, dst, src, nbytes):
        if nbytes:
            ctypes.memmove(dst, src, nbytes)

    def local(self, datatype, op):
        return None

    def lease(self, state):
        return _HostLease(state)


class _HostLease:
    """The host's lease: the communicator's one scratch buffer needs no bookkeeping
    (a timeout keeps it for good: call/allreduce._timed_out)."""

    __slots__ = ("state",)

    def __init__(self, state):
        self.state = state

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


HOST = _Host()
