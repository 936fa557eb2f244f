"""Phase 1 and the rank's plan, on addresses in any memory.

What every path of a call shares (_allreduce runs it on the caller's buffers,
_staged on pieces of a host copy of them): the plan of one rank, cached; phase 1
started nonblocking among the early ranks; waiting under the call's deadline.
"""
from __future__ import annotations

from functools import lru_cache

from mpi4py import MPI

from ..core.exchange import wait as _test_and_yield
from ..core.errors import Pending
from .plan import compile_rounds
from ..memory.buffers import region
from ..schedule import PHASE1, rank_view

_ORDERED_FLOAT_OPS = {MPI.MAX.handle, MPI.MIN.handle}


def exactly_commutative(op, datatype):
    """Whether op(a, b) == op(b, a) bit for bit, so reductions need no fixed order."""
    if not op.is_predefined:
        return False
    if op.handle in _ORDERED_FLOAT_OPS:
        return datatype.tocode() not in "efdgFDG"
    return True


@lru_cache(maxsize=256)
def plan_of(name, n, straggler, rank, count, extent, in_place, commutative, dt_handle):
    """(chunks, plan) of ``rank``.  A miss costs one rank's rounds: StragglAR is verified
    once per n and a new straggler only relabels this rank's slice (schedule.rank_view)."""
    chunks, rounds = rank_view(name, n, straggler, rank)
    return chunks, compile_rounds(rounds, chunks, rank, count, extent, in_place, commutative,
                                  prepared(name, n, straggler, rank, chunks))


def prepared(name, n, straggler, rank, chunks):
    """Chunks that phase 1 leaves in the receive buffer of ``rank``."""
    kind = PHASE1.get(name)
    straggler = n - 1 if straggler is None else straggler
    if kind is None or rank == straggler:
        return frozenset()
    if kind == "reduce_scatter":
        return frozenset([rank - (rank > straggler)])
    return frozenset(range(chunks))


def wait(request, deadline, phase, peers=()):
    wait_all([request], deadline, phase, peers)


def wait_all(requests, deadline, phase, peers=()):
    if not _test_and_yield(requests, deadline):
        raise Pending(peers, phase)


class Phase1:
    """A nonblocking phase 1 and the copy to make once it completes."""

    def __init__(self, request, copy=None):
        self.request, self.copy = request, copy

    def finish(self, memory):
        if self.copy:
            memory.copy(*self.copy)


def start_phase1(sub, kind, bounds, src, out, in_place, op, scratch, staged=False):
    """ReduceScatter (or AllReduce for "direct") among the early ranks, started.

    ``src``/``out`` are Messages (any memory); the result lands at ``scratch`` (an
    address in the same memory), copied into ``out`` by ``finish``, when the call is in
    place or ``staged`` (under a deadline: after a timeout MPI writes scratch, never
    the caller's buffer)."""
    count, dt, extent = out.count, out.datatype, out.extent
    if sub.Get_size() == 1:     # one early rank (n = 2): its own data, at any count on any MPI
        return Phase1(MPI.REQUEST_NULL, None if in_place else (out.address, src.address, count * extent))
    send = region((out if in_place else src).address, count, dt, extent)
    if kind == "allreduce":
        if not staged:
            return Phase1(sub.Iallreduce(MPI.IN_PLACE if in_place else send, region(out.address, count, dt, extent), op))
        offset, length = 0, count
        request = sub.Iallreduce(send, region(scratch, count, dt, extent), op)
    else:
        offset, length = bounds[sub.Get_rank()]
        counts = [b[1] for b in bounds]
        if not (in_place or staged):
            return Phase1(sub.Ireduce_scatter(send, region(out.address + offset * extent, length, dt, extent),
                                              counts, op))
        request = sub.Ireduce_scatter(send, region(scratch, length, dt, extent), counts, op)
    return Phase1(request, (out.address + offset * extent, scratch, length * extent))
