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
from .algorithms import PHASE1

__all__ = ["Simulation", "Tiers", "simulate"]


@dataclass(frozen=True)
class Simulation:
    """Times in seconds, on the clock of the ``arrivals`` argument."""
    finish: float            # the last rank holds the result
    post_arrival: float      # finish minus the last arrival: what the late rank waits for
    phase1_end: float        # when phase 1 ended on the early ranks (their arrival if none)
    ranks: tuple[float, ...]  # when each rank holds the result


@dataclass(frozen=True)
class Tiers:
    """Two tiers of links: ``node_of[r]`` is rank r's node; messages between nodes cost
    ``alpha_inter + bytes / bandwidth_inter``, those inside a node the simulator's alpha
    and bandwidth."""
    node_of: tuple
    alpha_inter: float
    bandwidth_inter: float


def simulate(schedule: Schedule, size_bytes: float, alpha: float, bandwidth: float,
             arrivals=None, tiers: Tiers | None = None) -> Simulation:
    """Completion time of ``schedule`` for a ``size_bytes`` buffer under the alpha-beta model
    (one tier, or two with ``tiers``)."""
    n = schedule.n
    arrivals = [0.0] * n if arrivals is None else [float(a) for a in arrivals]
    if len(arrivals) != n:
        raise ValueError(f"need {n} arrival times, got {len(arrivals)}")
    if tiers is not None and len(tiers.node_of) != n:
        raise ValueError(f"need the node of each of {n} ranks, got {len(tiers.node_of)}")
    beta = 1.0 / bandwidth
    ready = list(arrivals)
    phase1_end = _phase1(schedule, size_bytes, alpha, beta, ready, tiers)
    chunk_bytes = size_bytes / schedule.chunks
    cost = _costs(alpha, beta * chunk_bytes, tiers, chunk_bytes)
    for rnd in schedule.rounds:
        ready = _round(rnd, ready, cost)
    finish = max(ready)
    return Simulation(finish, finish - max(arrivals), phase1_end, tuple(ready))


def _costs(alpha, chunk_cost, tiers, chunk_bytes):
    """cost(src, dst) -> (alpha, seconds per chunk) of a message between the two ranks."""
    if tiers is None:
        return lambda src, dst: (alpha, chunk_cost)
    node, inter = tiers.node_of, (tiers.alpha_inter, chunk_bytes / tiers.bandwidth_inter)
    return lambda src, dst: (alpha, chunk_cost) if node[src] == node[dst] else inter


def _phase1(schedule: Schedule, size: float, alpha: float, beta: float, ready: list,
            tiers=None) -> float:
    """Run phase 1 on the early ranks in place; return when it ends."""
    kind = PHASE1[schedule.algorithm] if schedule.n > 1 else None
    if kind is None:
        return max(ready)
    early = schedule.early
    m = len(early)
    if kind == "reduce_to_owners":
        end = max(ready[r] for r in early) + _reduce_to_owners(schedule, size, alpha, beta, tiers)
    else:
        steps = (m - 1) * (1 if kind == "reduce_scatter" else 2)
        if tiers is not None:   # a flat ring among the early ranks crosses nodes in some step
            alpha, beta = max(alpha, tiers.alpha_inter), max(beta, 1.0 / tiers.bandwidth_inter)
        end = max(ready[r] for r in early) + steps * (alpha + size / m * beta)
    for r in early:
        ready[r] = end
    return end


def _reduce_to_owners(schedule, size, alpha, beta, tiers):
    """Hierarchical phase 1: a ring ReduceScatter inside each node, then each slice is
    reduced over the other nodes by a binomial tree and crosses to its owner."""
    node_of = tiers.node_of if tiers is not None else (0,) * schedule.n
    sizes = {}
    for r in range(schedule.n):
        sizes[node_of[r]] = sizes.get(node_of[r], 0) + 1
    k = max(sizes.values())
    inside = (k - 1) * (alpha + size / k * beta)
    if tiers is None or len(sizes) == 1:
        return inside
    owned = {}
    for r in schedule.owners:
        owned[r] = owned.get(r, 0) + 1
    piece = size / schedule.chunks
    tree = (len(sizes) - 2).bit_length() * (tiers.alpha_inter + min(owned.values()) * piece
                                            / tiers.bandwidth_inter)
    # the helper, owner of two slices, receives both from the last step
    return inside + tree + tiers.alpha_inter + max(owned.values()) * piece / tiers.bandwidth_inter


def _round(rnd, ready: list, cost) -> list:
    """Every message starts when both ends are ready; a rank is ready when its last ends
    and its port has carried all its messages of the round."""
    chunks: dict[tuple[int, int], int] = {}
    for t in rnd:
        chunks[(t.src, t.dst)] = chunks.get((t.src, t.dst), 0) + 1
    after = list(ready)
    sent, received = {}, {}
    for (src, dst), count in chunks.items():
        alpha, chunk_cost = cost(src, dst)
        busy = alpha + count * chunk_cost
        sent[src] = sent.get(src, 0.0) + busy
        received[dst] = received.get(dst, 0.0) + busy
        end = max(ready[src], ready[dst]) + busy
        if end > after[src]:
            after[src] = end
        if end > after[dst]:
            after[dst] = end
    # A rank's messages of a round share its port: it is busy at least for their sum
    # (the same as above when it sends and receives one message, as one-port schedules do).
    for busy in (sent, received):
        for r, t in busy.items():
            if ready[r] + t > after[r]:
                after[r] = ready[r] + t
    return after
