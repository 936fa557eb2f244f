"""The alpha-beta cost model's prediction, with alpha and bandwidth measured by a ping-pong."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..core import tags
from ..core.state import peek
from ..decide.topology import costs, shape
from ..schedule import tiers as _tiers
from ..schedule.algorithms import BY_NAME, HRING, NATIVE
from . import _cvar


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
    """Modelled post-arrival time: the library's cost model (schedule/tiers.py ``costs``,
    what ``auto`` and the report price with), on one tier with the ping-pong's figures,
    across nodes (``tiers``: the library's topology and links) with its two tiers.
    native2 is native again, MPICH's SMP-aware compositions are priced as hring; bound:
    on one tier the straggler's swap of the whole buffer, across nodes the floor; nan
    where the model has no price (a schedule that needs several nodes, on one)."""
    if algorithm == "bound":
        return alpha + nbytes / bandwidth if tiers is None else floor(nbytes, tiers)
    name = HRING if algorithm in _cvar.VARIANTS else NATIVE if algorithm == "native2" else algorithm
    if tiers is None and (name not in BY_NAME or BY_NAME[name].layout == "nodes"):
        return float("nan")     # one node: no second tier to price them on
    cost = costs(nbytes, tiers, n, alpha, bandwidth).get(name)
    return float("nan") if cost is None else cost.after(delay if straggler is not None else 0.0)


def floor(nbytes, tiers):
    """The two-tier floor after the arrival (schedule/tiers.py ``floor``)."""
    m, k, _, (_, b1, _, b2) = shape(tiers)
    return _tiers.floor(m, k, nbytes, b1, b2)
