"""A short demo: one rank arrives late; how soon after it arrives is the AllReduce done?

    mpiexec -n 4 python -m stragglar_mpi.bench.demo [--size 16M] [--delay 200] [--iters 5]

Every rank but the straggler calls at once; the straggler sleeps ``--delay`` ms
first.  Post-arrival time = the last rank's return minus the straggler's call
(one node: MPI_Wtime is one clock).  Results are checked against the exact sum.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from .. import Allreduce
from ..schedule.algorithms import NATIVE, SHOWN
from ..schedule.units import format_size, parse_size, time_in

# native first (the ratios are to it), the straggler-aware ones last
ALGORITHMS = SHOWN


def one_call(comm, algo, send, recv, straggler, delay):
    comm.Barrier()
    if comm.Get_rank() == straggler:
        time.sleep(delay)
    t_call = MPI.Wtime()
    if algo == NATIVE:
        comm.Allreduce(send, recv, MPI.SUM)
    else:
        Allreduce(comm, send, recv, MPI.SUM, algorithm=algo, straggler=straggler)
    t_ret = MPI.Wtime()
    calls = comm.allgather((t_call, t_ret))
    return max(r for _, r in calls) - calls[straggler][0]


def run(comm, size, delay, iters):
    n, rank = comm.Get_size(), comm.Get_rank()
    count = size // 4
    send = ((np.arange(count) + rank) % 16).astype(np.float32)
    want = sum(((np.arange(count) + r) % 16).astype(np.float32) for r in range(n))
    recv = np.empty_like(send)
    times = {a: [] for a in ALGORITHMS}
    wrong = {a: 0 for a in ALGORITHMS}
    for it in range(iters + 1):            # the first round warms up
        for algo in ALGORITHMS:
            t = one_call(comm, algo, send, recv, n - 1, delay)
            wrong[algo] += int(np.count_nonzero(recv != want))
            if it:
                times[algo].append(t)
    return {a: statistics.median(v) for a, v in times.items()}, wrong


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mpiexec -n 4 python -m stragglar_mpi.bench.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default="16M", help="buffer size (default %(default)s)")
    p.add_argument("--delay", type=time_in("ms"), default="300",
                   help="straggler delay: a bare number in ms, or with a unit (0.3s) (default %(default)s)")
    p.add_argument("--iters", type=int, default=5, help="timed iterations after one warm-up (default 5)")
    args = p.parse_args(argv)
    if args.iters < 1:
        p.error(f"--iters must be at least 1, got {args.iters}")
    if args.size < 4:
        p.error(f"--size must hold one float32 (4 bytes), got {args.size}")
    if not 0 <= args.delay < float("inf"):
        p.error(f"--delay must be a finite number of ms, at least 0; got {args.delay:g}")
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    if comm.Get_rank() == 0:
        print(f"StragglAR demo: {n} ranks, {format_size(args.size)} float32 SUM, "
              f"rank {n - 1} late by {args.delay:.0f} ms, median of {args.iters}", flush=True)
    medians, wrong = run(comm, args.size, args.delay / 1e3, args.iters)
    if comm.Get_rank() == 0:
        base = medians[NATIVE]
        print(f"{'algorithm':<12}{'post-arrival ms':>16}{'vs native':>11}{'#wrong':>8}")
        for algo in ALGORITHMS:
            print(f"{algo:<12}{medians[algo] * 1e3:>16.2f}{base / medians[algo]:>10.2f}x{wrong[algo]:>8}")
    return 0 if not any(wrong.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
