"""StragglAR and classic AllReduce algorithms as verified, simulated schedules (pure Python)."""
from __future__ import annotations

import functools

from .classic import direct, rhd, ring
from .algorithms import ALGORITHMS, DIRECT, PHASE1, RHD, RING, STRAGGLAR
from .model import Schedule, ScheduleError, Transfer, chunk_bounds
from .simulate import Simulation, simulate
from .stragglar import lower_bound_rounds, rank_rounds, synthesize
from .verify import verify

__all__ = [
    "ALGORITHMS", "PHASE1", "Schedule", "ScheduleError", "Simulation", "Transfer",
    "build", "chunk_bounds", "direct", "lower_bound_rounds", "rank_view", "rhd", "ring",
    "simulate", "synthesize", "verified_rounds", "verify",
]


@functools.lru_cache(maxsize=32)
def build(algorithm: str, n: int, straggler: int | None = None) -> Schedule:
    """The verified schedule of ``algorithm`` for ``n`` ranks (ring and rhd ignore ``straggler``)."""
    if algorithm == STRAGGLAR:
        # A relabelling cannot break a verified schedule: only the canonical one is checked.
        _verified_canonical(n)
        return synthesize(n, straggler)
    if algorithm == DIRECT:
        schedule = direct(n, straggler)
    elif algorithm in (RING, RHD):
        return _build_classic(algorithm, n)
    else:
        raise ScheduleError(f"unknown algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    return verify(schedule)


@functools.lru_cache(maxsize=64)
def _verified_canonical(n: int) -> int:
    """StragglAR with straggler n-1, verified once per n; its rounds.  Checked as NumPy
    copy columns round by round (stragglar.verify_canonical), without Transfer objects for
    powers of two and for the greedy."""
    if not isinstance(n, int) or n < 1:
        raise ScheduleError(f"n must be an int >= 1, got {n!r}")
    from .stragglar import verify_canonical
    return verify_canonical(n)


def verified_rounds(algorithm: str, n: int, straggler: int | None = None) -> int:
    """Rounds of the verified schedule; for StragglAR with the default straggler
    without building a whole schedule for a power of two (the field form)."""
    if algorithm != STRAGGLAR:
        return len(build(algorithm, n, straggler).rounds)
    rounds = _verified_canonical(n)
    if straggler is not None and straggler != n - 1:
        # Asked for explicitly (the command line's --every-straggler): check the
        # relabelled whole schedule too, although a relabelling cannot break it.
        verify(synthesize(n, straggler))
    return rounds


def rank_view(algorithm: str, n: int, straggler: int | None, rank: int):
    """(chunks, rounds): the transfers of ``rank`` round by round, in real ranks.

    StragglAR is built for straggler n-1 and relabelled here, one rank at a time:
    canonical early label i is real rank i, or i+1 at and above the straggler.
    For a power of two no whole schedule is built: O(rounds) time and memory.  Other
    n: ``rank_rounds`` verifies what it slices (the canonical schedule up to 256, one
    checked pass of the greedy above).
    """
    if algorithm != STRAGGLAR:
        chunks, slices = _slices(algorithm, n, straggler)
        return chunks, slices[rank]
    straggler = n - 1 if straggler is None else straggler
    if not 0 <= straggler < n or not 0 <= rank < n:
        raise ScheduleError(f"straggler and rank must be in 0..{n - 1}, got {straggler}, {rank}")
    # The field form is a proof (docs/SCHEDULES.md), verified for every power of two up
    # to 4096 by the unit tests and for any n by `python -m stragglar_mpi.schedule verify`;
    # verifying it again on every rank would cost O(n^2) (1.9 s at n=4096).
    m = n - 1
    label = m if rank == straggler else rank - (rank > straggler)
    rounds = rank_rounds(n, label)
    if straggler != m:
        real = lambda x: straggler if x == m else x + (x >= straggler)  # noqa: E731
        rounds = [tuple(Transfer(real(t.src), real(t.dst), t.chunk, t.reduce) for t in rnd)
                  for rnd in rounds]
    return max(m, 1), rounds


@functools.lru_cache(maxsize=8)
def _slices(algorithm: str, n: int, straggler: int | None):
    """Each rank's transfers round by round, for schedules built whole (classic, direct)."""
    schedule = build(algorithm, n, straggler)
    slices = [[[] for _ in schedule.rounds] for _ in range(schedule.n)]
    for i, rnd in enumerate(schedule.rounds):
        for t in rnd:
            slices[t.src][i].append(t)
            slices[t.dst][i].append(t)
    return schedule.chunks, [[tuple(r) for r in per_rank] for per_rank in slices]


@functools.lru_cache(maxsize=32)
def _build_classic(algorithm: str, n: int) -> Schedule:
    return verify(ring(n) if algorithm == RING else rhd(n))
