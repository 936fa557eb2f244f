"""``Allreduce``: check, pick an algorithm, run phase 1 and the per-rank plan."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from mpi4py import MPI

from . import _config, _transport
from ._buffers import is_in_place, resolve, validate
from ._plan import compile_plan
from ._state import state_of
from .schedule import PHASE1, build, chunk_bounds

_PAIR_TYPES = {getattr(MPI, n).handle for n in
               ("FLOAT_INT", "DOUBLE_INT", "LONG_INT", "SHORT_INT", "LONG_DOUBLE_INT", "TWOINT", "INT_INT")
               if getattr(MPI, n, MPI.DATATYPE_NULL) != MPI.DATATYPE_NULL}
_ORDERED_FLOAT_OPS = {MPI.MAX.handle, MPI.MIN.handle}
_SCHEDULED = ("stragglar", "ring", "rhd", "direct")


def Allreduce(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Drop-in for ``comm.Allreduce(sendbuf, recvbuf, op)``.

    ``straggler``: the rank expected to arrive last (default: the last rank).
    ``algorithm``: "auto" (default), "stragglar", "ring", "rhd", "direct" or
    "native"; the STRAGGLAR_ALGO environment variable overrides it.
    Non-commutative ops, pair types (MAXLOC/MINLOC), derived datatypes and a
    single rank always take the native path.
    """
    t_call = MPI.Wtime()
    name = _config.algorithm(algorithm)
    n = comm.Get_size()
    straggler = _check_straggler(straggler, n)
    validate(sendbuf, recvbuf, op)
    in_place = is_in_place(sendbuf)
    out = resolve(recvbuf, readonly=False)
    src = out if in_place else resolve(sendbuf, readonly=True)
    name = _decide(name, n, out, op)
    state = state_of(comm)
    if name == "native":
        MPI.Intracomm.Allreduce(comm, MPI.IN_PLACE if in_place else sendbuf, recvbuf, op)
        _record(state, name, None, t_call, t_call, None, MPI.Wtime(), None)
        return
    _check_op(op, out.datatype)
    transport = _transport.name()
    t_p1, first = _run_schedule(state, name, straggler, src, out, op, in_place, transport)
    _record(state, name, straggler if name in PHASE1_ROLES else None,
            t_call, t_p1, first, MPI.Wtime(), transport)


PHASE1_ROLES = ("stragglar", "direct")


def _check_straggler(straggler, n):
    if straggler is None:
        return n - 1
    if isinstance(straggler, (bool, np.bool_)) or not isinstance(straggler, (int, np.integer)):
        raise TypeError(f"straggler must be a rank (int) or None, not {type(straggler).__name__}")
    if not 0 <= straggler < n:
        raise ValueError(f"straggler {straggler} is not a rank of a communicator of size {n}")
    return int(straggler)


def _decide(name, n, out, op):
    """The algorithm that will run; every rank reaches the same answer from the same arguments."""
    dt = out.datatype
    if (n == 1 or out.count == 0 or not op.Is_commutative() or dt.handle in _PAIR_TYPES
            or not dt.is_predefined or dt.Get_size() != dt.Get_extent()[1]):
        return "native"
    if name == "auto":
        return "native" if out.count * dt.Get_size() < _config.auto_min_bytes() else "stragglar"
    return name


_OP_ACCEPTS = set()


def _check_op(op, datatype):
    """Raise MPI's error for an op that does not apply to the datatype, before any message."""
    key = (op.handle, datatype.handle)
    if not op.is_predefined or key in _OP_ACCEPTS:
        return
    extent = datatype.Get_extent()[1]
    a, b = bytearray(extent), bytearray(extent)
    op.Reduce_local([a, 1, datatype], [b, 1, datatype])
    _OP_ACCEPTS.add(key)


def _exactly_commutative(op, datatype):
    """Whether op(a, b) == op(b, a) bit for bit, so reductions need no fixed order."""
    if not op.is_predefined:
        return False
    if op.handle in _ORDERED_FLOAT_OPS:
        return datatype.tocode() not in "efdgFDG"
    return True


@lru_cache(maxsize=256)
def _plan(name, n, straggler, rank, count, extent, in_place, commutative, dt_handle):
    schedule = build(name, n, straggler)
    return schedule, compile_plan(schedule, rank, count, extent, in_place, commutative,
                                  _prepared(schedule, rank))


def _prepared(schedule, rank):
    """Chunks that phase 1 leaves in the receive buffer of ``rank``."""
    kind = PHASE1.get(schedule.algorithm)
    if kind is None or rank == schedule.straggler:
        return frozenset()
    if kind == "reduce_scatter":
        return frozenset([schedule.early.index(rank)])
    return frozenset(range(schedule.chunks))


def _run_schedule(state, name, straggler, src, out, op, in_place, transport):
    comm, dt, extent = state.private, out.datatype, out.extent
    rank, n = comm.Get_rank(), comm.Get_size()
    commutative = _exactly_commutative(op, dt)
    schedule, plan = _plan(name, n, straggler, rank, out.count, extent, in_place,
                           commutative, dt.handle)
    scratch_bytes = plan.scratch_bytes
    kind = PHASE1.get(name)
    if kind and rank != straggler:
        bounds = chunk_bounds(out.count, schedule.chunks)
        scratch_bytes = max(scratch_bytes, max(b[1] for b in bounds) * extent)
        scratch = state.scratch(scratch_bytes)
        _phase1(state.early_comm(straggler), kind, bounds, src, out, op, in_place, scratch)
    scratch = state.scratch(scratch_bytes)
    t_p1 = MPI.Wtime()
    addresses = (src.address, out.address, MPI.buffer(scratch).address)
    first = _transport.execute(plan, addresses, comm, dt, op, transport)
    return t_p1, first


def _region(msg, offset, count):
    """A [buffer, count, datatype] spec of ``count`` elements at element ``offset``."""
    extent = msg.extent
    return [MPI.buffer.fromaddress(msg.address + offset * extent, count * extent), count, msg.datatype]


def _phase1(sub, kind, bounds, src, out, op, in_place, scratch):
    """ReduceScatter (or AllReduce for "direct") among the early ranks."""
    count = out.count
    if kind == "allreduce":
        sub.Allreduce(MPI.IN_PLACE if in_place else _region(src, 0, count), _region(out, 0, count), op)
        return
    offset, length = bounds[sub.Get_rank()]
    counts = [b[1] for b in bounds]
    if not in_place:
        sub.Reduce_scatter(_region(src, 0, count), _region(out, offset, length), counts, op)
        return
    nbytes = length * out.extent
    sub.Reduce_scatter(_region(out, 0, count), [scratch[:nbytes], length, out.datatype], counts, op)
    dst = np.frombuffer(MPI.buffer.fromaddress(out.address + offset * out.extent, nbytes), np.uint8)
    dst[:] = scratch[:nbytes]


def _record(state, name, straggler, t_call, t_p1, first, t_end, transport):
    state.calls[name] += 1
    arrived = first if first is not None else t_p1
    state.last = {
        "algorithm": name,
        "straggler": straggler,
        "transport": transport,
        "reduce_scatter": t_p1 - t_call,
        "wait": arrived - t_p1,
        "post_arrival": t_end - arrived,
        "total": t_end - t_call,
    }


def stats(comm) -> dict:
    """Per-communicator counters: ``calls`` (algorithm -> count) and ``last`` (the last call)."""
    state = state_of(comm)
    return {"calls": dict(state.calls), "last": dict(state.last)}
