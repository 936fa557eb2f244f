"""The alpha-beta cost model's prediction, with alpha and bandwidth measured by a ping-pong."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..core import tags
from ..core.state import peek
from ..schedule import build, simulate
from ..schedule import tiers as _tiers


def tiers_of(comm):
    """(topology, links) the library measured at the setup of ``comm`` when it spans
    nodes, else None (one tier)."""
    state = peek(comm)
    return None if state is None else state.tiers()


def link(comm, big: int) -> tuple[float, float]:
    """(alpha s, bandwidth B/s) between ranks 0 and 1: half round trips of 8 B and ``big`` B."""
    alpha = _half_rtt(comm, 8, 50)
    bulk = _half_rtt(comm, big, 5)
    return alpha, big / max(bulk - alpha, 1e-9)


def _half_rtt(comm, nbytes, reps):
    """The smallest half round trip of ``nbytes`` between ranks 0 and 1 (rank 0's answer, shared)."""
    rank = comm.Get_rank()
    buf = np.zeros(nbytes, dtype=np.uint8)
    best = float("inf")
    comm.Barrier()
    for _ in range(reps if rank < 2 else 0):
        t0 = MPI.Wtime()
        if rank == 0:
            comm.Send(buf, 1, tags.BENCH_MODEL)
            comm.Recv(buf, 1, tags.BENCH_MODEL)
        else:
            comm.Recv(buf, 0, tags.BENCH_MODEL)
            comm.Send(buf, 0, tags.BENCH_MODEL)
        best = min(best, (MPI.Wtime() - t0) / 2)
    return comm.bcast(best, root=0)


def predict(algorithm: str, n: int, straggler, nbytes: int, delay: float,
            alpha: float, bandwidth: float, tiers=None) -> float:
    """Modelled post-arrival time.  On one tier: the schedule simulated with the
    ping-pong's figures, native as RHD (MPICH's large-message choice).  Across nodes
    (``tiers``: the library's topology and links) the library's two-tier model
    (schedule/tiers.py, what ``auto`` prices with): native as the better of ring and
    rhd, MPICH's SMP-aware compositions as hring, bound as the floor."""
    if tiers is not None:
        return _two_tier(algorithm, nbytes, delay if straggler is not None else 0.0, tiers)
    if algorithm == "bound":
        return alpha + nbytes / bandwidth
    if algorithm in ("hierarchical", "hring") or algorithm.startswith("native-comp"):
        return float("nan")     # one node: no second tier to price them on
    name = "rhd" if algorithm in ("native", "native2") else algorithm
    arrivals = [0.0] * n
    if straggler is not None:
        arrivals[straggler] = delay
    schedule = build(name, n, n - 1 if straggler is None else straggler)
    return simulate(schedule, nbytes, alpha, bandwidth, arrivals).post_arrival


def _two_tier(algorithm, nbytes, gap, tiers):
    m, k, lanes, figures = shape(tiers)
    if algorithm == "bound":
        return floor(nbytes, tiers)
    name = ("hring" if algorithm.startswith("native-comp") else
            "native" if algorithm in ("native", "native2") else algorithm)
    cost = _tiers.costs(m, k, nbytes, *figures, lanes).get(name)
    return float("nan") if cost is None else cost.after(gap)


def shape(tiers):
    """(nodes, largest node, smallest node, (a1, b1, a2, b2)) of the library's tiers."""
    topology, links = tiers
    sizes = [len(node) for node in topology.nodes]
    figures = (links.alpha_intra, links.bandwidth_intra, links.alpha_inter, links.bandwidth_inter)
    return len(sizes), max(sizes), min(sizes), figures


def floor(nbytes, tiers):
    """The two-tier floor after the arrival (schedule/tiers.py ``floor``)."""
    m, k, _, (_, b1, _, b2) = shape(tiers)
    return _tiers.floor(m, k, nbytes, b1, b2)
