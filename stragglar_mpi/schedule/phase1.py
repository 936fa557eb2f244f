"""Phase 1 as rounds of transfers among the early ranks, run by the same interpreter as
phase 2: no MPI collective, no sub-communicator of the early ranks.

The n-1 early ranks, in rank order, are positions 0..m-1 of a ring (m = n-1); the buffer
is cut into m chunks, chunk c belonging to position c (StragglAR's early rank c).

- ``reduce_scatter`` (StragglAR): in round k = 0..m-2 position p sends chunk
  (p-1-k) mod m to position p+1, which folds in its own data.  Chunk c starts at
  position c+1 and moves one position a round, so after m-1 rounds it reaches position
  c with every early rank's contribution counted once.
- ``allreduce`` (direct): the same, then m-1 rounds in which position p copies chunk
  (p-k) mod m, already complete, on to position p+1: every position holds every chunk.

Each chunk is reduced along one path in a fixed order, so the result depends only on
(n, straggler): the bits are the same on every run.  The argument above is the proof;
tests/unit/test_phase1.py checks it symbolically (every n up to 65).
A rank's own rounds (``rank_view``) take O(m) time, so no rank builds the whole of it.
"""
from __future__ import annotations

from .algorithms import ALLREDUCE, REDUCE_SCATTER
from .model import ScheduleError, Transfer

__all__ = ["rank_view", "round_count", "rounds"]

KINDS = (REDUCE_SCATTER, ALLREDUCE)


def _positions(n, straggler):
    early = [r for r in range(n) if r != straggler]
    return early, len(early)


def rounds(kind, n, straggler):
    """Every transfer of phase 1, round by round, in real ranks."""
    early, m = _positions(n, straggler)
    out = [[Transfer(early[p], early[(p + 1) % m], (p - 1 - k) % m, True) for p in range(m)]
           for k in range(m - 1)]
    if kind == ALLREDUCE:
        out += [[Transfer(early[p], early[(p + 1) % m], (p - k) % m) for p in range(m)]
                for k in range(m - 1)]
    return out


def round_count(kind, m):
    """Rounds of phase 1 among ``m`` early ranks."""
    return (m - 1) * (2 if kind == ALLREDUCE else 1)


def rank_view(kind, n, straggler, rank):
    """(chunks, rounds): ``rank``'s transfers of phase 1 round by round (none on the
    straggler); the same as slicing ``rounds``, in O(m)."""
    if kind not in KINDS:
        raise ScheduleError(f"phase 1 must be one of {KINDS}, got {kind!r}")
    early, m = _positions(n, straggler)
    if rank == straggler:
        return max(m, 1), [()] * round_count(kind, m)
    p = early.index(rank)
    nxt, prv = early[(p + 1) % m], early[(p - 1) % m]
    mine = [(Transfer(rank, nxt, (p - 1 - k) % m, True), Transfer(prv, rank, (p - 2 - k) % m, True))
            for k in range(m - 1)]
    if kind == ALLREDUCE:
        mine += [(Transfer(rank, nxt, (p - k) % m), Transfer(prv, rank, (p - 1 - k) % m))
                 for k in range(m - 1)]
    return max(m, 1), mine

