"""Alpha-beta cost model: completion time of a schedule when ranks arrive at different times.

A message costs ``alpha + bytes / bandwidth``; transfers between the same pair in
one round travel as one message.  Ranks are not globally synchronised: a message
of round r starts as soon as both its ends have finished their messages of
earlier rounds, so a late rank delays only what depends on it.  Phase 1
(StragglAR's ReduceScatter, direct's AllReduce among the early ranks) is modelled
as a ring among the n-1 early ranks that starts when the last of them arrives.
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import Schedule
from .verify import PHASE1

__all__ = ["Simulation", "simulate"]


@dataclass(frozen=True)
class Simulation:
    """Times in seconds, on the clock of the ``arrivals`` argument."""
    finish: float            # the last rank holds the result
    post_arrival: float      # finish minus the last arrival: what the late rank waits for
    phase1_end: float        # when phase 1 ended on the early ranks (their arrival if none)
    ranks: tuple[float, ...]  # when each rank holds the result


def simulate(schedule: Schedule, size_bytes: float, alpha: float, bandwidth: float,
             arrivals=None) -> Simulation:
    """Completion time of ``schedule`` for a ``size_bytes`` buffer under the alpha-beta model."""
    n = schedule.n
    arrivals = [0.0] * n if arrivals is None else [float(a) for a in arrivals]
    if len(arrivals) != n:
        raise ValueError(f"need {n} arrival times, got {len(arrivals)}")
    beta = 1.0 / bandwidth
    ready = list(arrivals)
    phase1_end = _phase1(schedule, size_bytes, alpha, beta, ready)
    chunk_bytes = size_bytes / schedule.chunks
    for rnd in schedule.rounds:
        ready = _round(rnd, ready, alpha, beta * chunk_bytes)
    finish = max(ready)
    return Simulation(finish, finish - max(arrivals), phase1_end, tuple(ready))


def _phase1(schedule: Schedule, size: float, alpha: float, beta: float, ready: list) -> float:
    """Run phase 1 on the early ranks in place; return when it ends."""
    kind = PHASE1[schedule.algorithm] if schedule.n > 1 else None
    if kind is None:
        return max(ready)
    early = schedule.early
    m = len(early)
    steps = (m - 1) * (1 if kind == "reduce_scatter" else 2)
    end = max(ready[r] for r in early) + steps * (alpha + size / m * beta)
    for r in early:
        ready[r] = end
    return end


def _round(rnd, ready: list, alpha: float, chunk_cost: float) -> list:
    """Every message starts when both ends are ready; a rank is ready when its last ends."""
    chunks: dict[tuple[int, int], int] = {}
    for t in rnd:
        chunks[(t.src, t.dst)] = chunks.get((t.src, t.dst), 0) + 1
    after = list(ready)
    for (src, dst), count in chunks.items():
        end = max(ready[src], ready[dst]) + alpha + count * chunk_cost
        if end > after[src]:
            after[src] = end
        if end > after[dst]:
            after[dst] = end
    return after
