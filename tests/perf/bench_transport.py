"""Post-arrival time of StragglAR with each transport, native comm.Allreduce beside them.

    mpiexec -n 8 python tests/perf/bench_transport.py [--iters 20]

For each size the three variants are interleaved in every iteration, so noise
from the machine hits all of them alike.  The straggler (last rank) sleeps long
enough to hide phase 1, then post-arrival = last return - straggler's call.
"""
import argparse
import os
import statistics

import numpy as np
from mpi4py import MPI

from stragglar_mpi.demo import one_call

SIZES = [8, 4 << 10, 64 << 10, 1 << 20, 16 << 20]
VARIANTS = [("native", None), ("stragglar", "python"), ("stragglar", "cython")]


def measure(comm, nbytes, iters):
    n, rank = comm.Get_size(), comm.Get_rank()
    count = max(nbytes // 4, 1)
    send = ((np.arange(count) + rank) % 8).astype(np.float32)
    recv = np.empty_like(send)
    delay = 0.005 + nbytes / 200e6          # hides the ReduceScatter on this machine
    times = {v: [] for v in VARIANTS}
    for it in range(iters + 2):             # two warm-up rounds
        for algo, transport in VARIANTS:
            if transport:
                os.environ["STRAGGLAR_TRANSPORT"] = transport
            t = one_call(comm, algo, send, recv, n - 1, delay)
            if it >= 2:
                times[(algo, transport)].append(t)
    return {v: statistics.median(t) for v, t in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size (fewer above 1 MiB)")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        print(f"{comm.Get_size()} ranks, float32 SUM, median post-arrival time in microseconds")
        print(f"{'bytes':>10} {'native':>10} {'python':>10} {'cython':>10} {'cython/python':>14}")
    for nbytes in SIZES:
        iters = args.iters if nbytes <= (1 << 20) else max(3, args.iters // 4)
        med = measure(comm, nbytes, iters)
        if comm.Get_rank() == 0:
            nat, py, cy = (med[v] * 1e6 for v in VARIANTS)
            print(f"{nbytes:>10} {nat:>10.0f} {py:>10.0f} {cy:>10.0f} {cy / py:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
