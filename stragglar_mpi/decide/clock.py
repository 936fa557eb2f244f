"""A clock common to all ranks: each rank's MPI_Wtime offset from rank 0's (Cristian's bounds).

Used by the arrival notices (`_arrival`) and by the bench tool: no decision compares
raw MPI_Wtime of two ranks, whose clocks (on different nodes) may be far apart.
Each arrival table stamps a rank's arrival (when it entered the call, on rank 0's clock)
through ``stamp``.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..core import tags

#: A test hook, not a setting (no environment variable reaches it): seconds added to this
#: process's arrival stamps, so that a test makes its rank look late to every decision
#: read from the stamps (the records, "predict", "auto", the report) without sleeping
#: (tests/mpi/helpers.py ``late``).  None outside the tests: one comparison a tracked call.
late_by = None


def stamp(entry: float) -> float:
    """This rank's arrival stamp from ``entry``, when it entered the call on rank 0's clock."""
    return entry if late_by is None else entry + late_by


def offsets(comm, rounds: int = 16) -> float:
    """This rank's ``MPI_Wtime() - rank 0's``; subtract it from a local time to get rank 0's clock.

    Each ping-pong bounds the offset: the peer read its clock between rank 0's
    send and receive.  We keep the smallest offset inside every bound, so ranks
    that share one kernel clock (one node) get exactly 0, and others the value
    closest to it that every round trip allows.  MPI_WTIME_IS_GLOBAL is not
    trusted: Intel MPI 2021 sets it, yet its MPI_Wtime (the TSC) starts at each
    process's own origin, milliseconds apart on one node.
    """
    rank, n = comm.Get_rank(), comm.Get_size()
    found = [0.0] * n
    for peer in range(1, n):
        if rank == 0:
            found[peer] = _measure(comm, peer, rounds)
        elif rank == peer:
            _answer(comm, rounds)
    return comm.scatter(found if rank == 0 else None, root=0)


def _measure(comm, peer, rounds):
    stamp = np.zeros(1)
    lo, hi = -float("inf"), float("inf")
    for _ in range(rounds):
        t0 = MPI.Wtime()
        comm.Send(stamp, peer, tags.CLOCK)
        comm.Recv(stamp, peer, tags.CLOCK)
        t1 = MPI.Wtime()
        lo, hi = max(lo, stamp[0] - t1), min(hi, stamp[0] - t0)
    if lo > hi:                 # the clocks drifted during the rounds: take the middle
        return (lo + hi) / 2
    return min(max(0.0, lo), hi)


def _answer(comm, rounds):
    stamp = np.zeros(1)
    for _ in range(rounds):
        comm.Recv(stamp, 0, tags.CLOCK)
        stamp[0] = MPI.Wtime()
        comm.Send(stamp, 0, tags.CLOCK)
