"""The alpha-beta cost model's prediction, with alpha and bandwidth measured by a ping-pong."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..core import tags
from ..schedule import build, simulate




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
            alpha: float, bandwidth: float) -> float:
    """Modelled post-arrival time; native is modelled as RHD (MPICH's large-message choice)."""
    if algorithm == "bound":
        return alpha + nbytes / bandwidth
    if algorithm in ("hierarchical", "hring") or algorithm.startswith("native-comp"):
        return float("nan")     # needs the nodes and two tiers: schedule simulate --node-size
    name = "rhd" if algorithm in ("native", "native2") else algorithm
    arrivals = [0.0] * n
    if straggler is not None:
        arrivals[straggler] = delay
    schedule = build(name, n, n - 1 if straggler is None else straggler)
    return simulate(schedule, nbytes, alpha, bandwidth, arrivals).post_arrival
