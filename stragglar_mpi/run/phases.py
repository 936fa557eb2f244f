"""Phase 1 and the rank's plan, on addresses in any memory.

What every path of a call shares (run/execute.py runs it on the caller's buffers,
run/staged.py on a host copy of them): the plans of one rank, cached.  Phase 1 is a
plan too (schedule/phase1.py: a ring among the early ranks), run by the same
interpreter on the private duplicate before phase 2: no collective of MPI and no
sub-communicator of the early ranks, so nothing in it blocks outside the deadline.
"""
from __future__ import annotations

from functools import lru_cache

from mpi4py import MPI

from .plan import compile_rounds
from ..schedule import PHASE1, phase1, rank_view

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
    """(chunks, phase-1 plan or None, plan) of ``rank``.  A miss costs one rank's rounds:
    StragglAR is verified once per n and a new straggler only relabels this rank's slice
    (schedule.rank_view); phase 1 is built for the rank alone (schedule/phase1.py)."""
    chunks, rounds = rank_view(name, n, straggler, rank)
    kind = PHASE1.get(name)
    first = None
    if kind is not None and n > 2 and rank != straggler:
        m, mine = phase1.rank_view(kind, n, straggler, rank)
        first = compile_rounds(mine, m, rank, count, extent, in_place, commutative)
    return chunks, first, compile_rounds(rounds, chunks, rank, count, extent, in_place, commutative,
                                         prepared(name, n, straggler, rank, chunks))


def prepared(name, n, straggler, rank, chunks):
    """Chunks that phase 1 leaves in the receive buffer of ``rank`` (none with one early
    rank: its own data stays where the caller put it)."""
    kind = PHASE1.get(name)
    straggler = n - 1 if straggler is None else straggler
    if kind is None or rank == straggler or n <= 2:
        return frozenset()
    if kind == "reduce_scatter":
        return frozenset([rank - (rank > straggler)])
    return frozenset(range(chunks))
