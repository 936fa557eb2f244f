"""Alpha-beta cost model: completion time of a schedule when ranks arrive at different times.

A message costs ``alpha + bytes / bandwidth``; transfers between the same pair in
one round travel as one message.  Ranks are not globally synchronised: a message
of round r starts as soon as both its ends have finished their messages of
earlier rounds, so a late rank delays only what depends on it.

One tier (no ``Tiers``): a rank's messages of a round share one port.  Two tiers:
a rank's link inside its node and its NIC are separate devices, each with a send
and a receive side; the messages of a round queue on the ports they use (in the
order they can start), so a rank may send inside and across in the same round.
``Tiers(..., shared_port=True)`` puts both on one port.

Phase 1 (StragglAR's ReduceScatter, direct's AllReduce among the early ranks) is
modelled as a ring among the n-1 early ranks that starts when the last of them
arrives; hierarchical StragglAR's phase 1 is a schedule of its own
(``hierarchical.phase1``), simulated like phase 2 from each early rank's arrival.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from operator import attrgetter

from .model import Schedule
from .algorithms import PHASE1, REDUCE_TO_OWNERS
from .phase1 import round_count

__all__ = ["Simulation", "Tiers", "simulate", "phase1_of"]

_PAIR = attrgetter("src", "dst")


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
    shared_port: bool = False    # True: a rank's messages inside and across share one port


def simulate(schedule: Schedule, size_bytes: float, alpha: float, bandwidth: float,
             arrivals=None, tiers: Tiers | None = None, phase1: Schedule | None = None
             ) -> Simulation:
    """Completion time of ``schedule`` for a ``size_bytes`` buffer under the alpha-beta model
    (one tier, or two with ``tiers``).  ``phase1``: the "reduce_to_owners" schedule run
    before a hierarchical one (default: built for the nodes of ``tiers``, local order =
    rank order)."""
    n = schedule.n
    arrivals = [0.0] * n if arrivals is None else [float(a) for a in arrivals]
    if len(arrivals) != n:
        raise ValueError(f"need {n} arrival times, got {len(arrivals)}")
    if tiers is not None and len(tiers.node_of) != n:
        raise ValueError(f"need the node of each of {n} ranks, got {len(tiers.node_of)}")
    beta = 1.0 / bandwidth
    ready = list(arrivals)
    phase1_end = _phase1(schedule, size_bytes, alpha, beta, ready, tiers, phase1)
    ready = _run(schedule, size_bytes, alpha, beta, ready, tiers)
    finish = max(ready)
    return Simulation(finish, finish - max(arrivals), phase1_end, tuple(ready))


def _run(schedule, size, alpha, beta, ready, tiers) -> list:
    """Ready times after every round of ``schedule``."""
    chunk_bytes = size / schedule.chunks
    if tiers is None:
        cost = lambda src, dst: (alpha, beta * chunk_bytes)  # noqa: E731
        for rnd in schedule.rounds:
            ready = _round(rnd, ready, cost)
        return ready
    costs = ((alpha, beta * chunk_bytes), (tiers.alpha_inter, chunk_bytes / tiers.bandwidth_inter))
    for rnd in schedule.rounds:
        ready = _round_ports(rnd, ready, tiers.node_of, costs, tiers.shared_port)
    return ready


def _round_ports(rnd, ready: list, node_of, costs, shared: bool) -> list:
    """Each port (a rank's link inside its node or its NIC, send or receive side) is a
    queue: it carries its messages one after the other, in the order they can start
    (when both ends are ready).  A message ends when both its ports have carried it,
    a rank when its last message ends."""
    chunks = Counter(map(_PAIR, rnd))
    messages = []
    for (src, dst), count in chunks.items():
        inter = node_of[src] != node_of[dst]
        alpha, chunk_cost = costs[inter]
        port = 2 * (inter and not shared)
        start = ready[src] if ready[src] > ready[dst] else ready[dst]
        messages.append((start, len(messages), (src, port), (dst, port + 1),
                         alpha + count * chunk_cost))
    messages.sort()
    free: dict[tuple[int, int], float] = {}
    after = list(ready)
    for start, _, out, into, busy in messages:
        end = start
        for key in (out, into):
            done = max(free.get(key, 0.0), start) + busy
            free[key] = done
            end = done if done > end else end
        if end > after[out[0]]:
            after[out[0]] = end
        if end > after[into[0]]:
            after[into[0]] = end
    return after


def _phase1(schedule: Schedule, size: float, alpha: float, beta: float, ready: list,
            tiers=None, first=None) -> float:
    """Run phase 1 on the early ranks in place; return when it ends."""
    kind = PHASE1.get(schedule.algorithm) if schedule.n > 1 else None
    if kind is None:
        return max(ready)
    early = schedule.early
    m = len(early)
    if kind == REDUCE_TO_OWNERS:
        first = phase1_of(schedule, tiers) if first is None else first
        if (first.owners, first.chunks, first.straggler) != (schedule.owners, schedule.chunks,
                                                            schedule.straggler):
            raise ValueError("the phase-1 schedule leaves other owners than the schedule expects; "
                             "pass the phase1 built for the same nodes")
        ready[:] = _run(first, size, alpha, beta, ready, tiers)
        return max(ready[r] for r in early)
    steps = round_count(kind, m)
    if tiers is not None:   # a flat ring among the early ranks crosses nodes in some step
        alpha, beta = max(alpha, tiers.alpha_inter), max(beta, 1.0 / tiers.bandwidth_inter)
    end = max(ready[r] for r in early) + steps * (alpha + size / m * beta)
    for r in early:
        ready[r] = end
    return end


def phase1_of(schedule: Schedule, tiers=None) -> Schedule:
    """The phase-1 schedule that goes with a hierarchical phase-2 ``schedule`` on the
    nodes of ``tiers`` (ranks in rank order; one node without tiers)."""
    from .hierarchical import phase1
    node_of = tiers.node_of if tiers is not None else (0,) * schedule.n
    firsts = sorted({node_of[r]: r for r in reversed(range(schedule.n))}.items(), key=lambda kv: kv[1])
    nodes = tuple(tuple(r for r in range(schedule.n) if node_of[r] == v) for v, _ in firsts)
    owners = len(set(schedule.owners))     # k-1 slices of W pieces of k sub-chunks
    pieces = schedule.chunks // (owners * (owners + 1))
    return phase1(nodes, schedule.straggler, pieces)


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
