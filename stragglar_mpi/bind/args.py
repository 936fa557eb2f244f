"""The arguments of one ``Allreduce`` call, checked, and the algorithm they allow
(decide/algorithm.py ``for_arguments``).

``check`` runs on a miss of the compiled entry (call/_entry.pyx), which keeps
the resulting ``Args`` (``unbound``) and binds them to the memory of every call
that repeats those arguments (``rebound``).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..core import config as _config
from ..core.errors import did_you_mean
from ..memory import device as _device
from ..memory.buffers import Message, messages
from ..decide.algorithm import for_arguments
from ..decide.policy import POLICIES
from ..schedule.algorithms import AUTO, NATIVE


class Args:
    """The checked arguments of one call.  ``native_from_c``: a repeat of it is one
    MPI call from the compiled entry (native, untracked, ``native_from_c``).  ``route``:
    which memory runs it, "host", "device" or "staged" (_device.route).  ``why``: the
    reason the arguments give for what runs (decide/why.py), None where ``auto`` decides."""

    __slots__ = ("n", "policy", "sendbuf", "recvbuf", "op", "in_place", "out", "src", "name",
                 "signature", "native_from_c", "route", "commutes", "why")

    def __init__(self, n, policy, sendbuf, recvbuf, op, in_place, out, src, name, signature,
                 native_from_c=False, route="host", why=None):
        self.n, self.policy, self.op, self.in_place = n, policy, op, in_place
        self.sendbuf, self.recvbuf, self.out, self.src = sendbuf, recvbuf, out, src
        self.name, self.signature, self.native_from_c = name, signature, native_from_c
        self.route, self.why = route, why
        self.commutes = exactly_commutative(op, out.datatype)   # reductions need no fixed order

    def unbound(self):
        """These arguments without the caller's objects (what a binding keeps)."""
        out = _unbound(self.out)
        return self.rebound(None, None, out, out if self.in_place else _unbound(self.src))

    def rebound(self, sendbuf, recvbuf, out, src):
        return Args(self.n, self.policy, sendbuf, recvbuf, self.op, self.in_place, out, src,
                    self.name, self.signature, self.native_from_c, self.route, self.why)


def _unbound(msg):
    return Message(None, None, msg.address, msg.count, msg.datatype, msg.extent, msg.memory)


def check(comm, sendbuf, recvbuf, op, straggler, algorithm, settings) -> Args:
    """Check every argument; raise what mpi4py raises for a bad buffer or op."""
    requested = _config.algorithm(algorithm, settings)
    n = comm.Get_size()
    policy = check_straggler(straggler, n)
    in_place, src, out = messages(sendbuf, recvbuf, op)
    name, because = for_arguments(requested, n, out, op, settings)
    reducible = bytes_as_unsigned_char(src, out, op, in_place)
    if out.datatype.is_predefined:     # the same error, whichever path runs (host or device)
        check_op(op, reducible[1].datatype)
    route = _device.route(src, out, op, needs_kernel=name != NATIVE)
    if name != NATIVE or route != "host":     # MPI gets our Messages, not the caller's specs
        src, out = reducible
    signature = (requested, str(policy), in_place, out.count, out.datatype.Get_size(),
                 _type_name(out.datatype), _op_name(op))
    why = because or (None if requested == AUTO else ("named", requested, bool(settings.algo)))
    return Args(n, policy, sendbuf, recvbuf, op, in_place, out, src, name, signature,
                native_from_c(name, route, out, settings.timeout), route, why)


#: Above it a native call under STRAGGLAR_TIMEOUT goes the Python way (tracked, on scratch
#: of the pools), as a timed one from C copies its buffer into a scratch of its binding.
TIMED_NATIVE_BYTES = 1 << 20


def native_from_c(name, route, out, timeout):
    """Whether a repeat is one MPI call from the compiled entry: a native call in host
    memory; under a timeout only up to TIMED_NATIVE_BYTES of a datatype without holes, and
    with MPI_THREAD_MULTIPLE (the stall watchdog names the missing ranks: call/watchdog.py).
    Its misses then run the same way (run/native.py), so every rank makes the same MPI calls."""
    if name != NATIVE or route != "host":
        return False
    return timeout is None or (out.count * out.extent <= TIMED_NATIVE_BYTES
                               and out.datatype.Get_size() == out.extent
                               and MPI.Query_thread() == MPI.THREAD_MULTIPLE)


def check_straggler(straggler, n):
    """The role policy: a rank, "arrival" or "predict" (None means "arrival")."""
    if straggler is None:
        return "arrival"
    if isinstance(straggler, str):
        if straggler not in POLICIES:
            raise ValueError(f"straggler must be a rank, 'arrival' or 'predict'; got {straggler!r}"
                             + did_you_mean(straggler, POLICIES))
        return straggler
    if isinstance(straggler, (bool, np.bool_)) or not isinstance(straggler, (int, np.integer)):
        raise TypeError(f"straggler must be a rank (int), 'arrival', 'predict' or None, "
                        f"not {type(straggler).__name__}")
    if not 0 <= straggler < n:
        raise ValueError(f"straggler {straggler} is not a rank of a communicator of size {n}")
    return int(straggler)


def bytes_as_unsigned_char(src, out, op, in_place):
    """A buffer whose format is "B" (uint8, bytearray) is MPI.BYTE to mpi4py, and MPI's
    AllReduce reduces it as unsigned chars with any op, while MPI_Reduce_local accepts
    only the bitwise ones on MPI.BYTE: our own reductions take it as MPI.UNSIGNED_CHAR."""
    if out.datatype.handle != MPI.BYTE.handle or op.handle in _BYTE_OPS:
        return src, out
    as_uchar = [m.retyped(MPI.UNSIGNED_CHAR) for m in (src, out)]
    return (as_uchar[1] if in_place else as_uchar[0]), as_uchar[1]


_BYTE_OPS = {MPI.BAND.handle, MPI.BOR.handle, MPI.BXOR.handle}
_OP_ACCEPTS = set()


def check_op(op, datatype):
    """Raise MPI's error for an op that does not apply to the datatype, before any message."""
    key = (op.handle, datatype.handle)
    if not op.is_predefined or key in _OP_ACCEPTS:
        return
    extent = datatype.Get_extent()[1]
    a, b = bytearray(extent), bytearray(extent)
    op.Reduce_local([a, 1, datatype], [b, 1, datatype])
    _OP_ACCEPTS.add(key)


# Handles are per-process addresses in Open MPI, so ranks compare predefined ops by name.
_OP_NAMES = {getattr(MPI, n).handle: n for n in
             ("MAX", "MIN", "SUM", "PROD", "LAND", "BAND", "LOR", "BOR", "LXOR", "BXOR",
              "MAXLOC", "MINLOC", "REPLACE", "NO_OP")}


def _op_name(op):
    """'MPI.SUM' (names, not handles: Open MPI's handles are addresses, different per rank)."""
    if not op.is_predefined:
        return "a user-defined op"
    name = _OP_NAMES.get(op.handle)
    return f"MPI.{name}" if name else "a predefined op"


def _type_name(datatype):
    try:
        return datatype.tocode()
    except Exception:
        return datatype.Get_name() or "derived"


_ORDERED_FLOAT_OPS = {MPI.MAX.handle, MPI.MIN.handle}


def exactly_commutative(op, datatype):
    """Whether op(a, b) == op(b, a) bit for bit, so reductions need no fixed order."""
    if not (op.is_predefined and datatype.is_predefined):
        return False            # (a plan never runs these: bind sends them native)
    if op.handle in _ORDERED_FLOAT_OPS:
        return datatype.tocode() not in "efdgFDG"
    return True
