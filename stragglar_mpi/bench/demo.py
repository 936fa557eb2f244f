"""A short demo: one rank arrives late; how soon after it arrives is the AllReduce done?

    mpiexec -n 8 python -m stragglar_mpi.bench.demo [--size 64M] [--delay 200] [--iters 15]

Every rank but the last calls at once; the last one sleeps ``--delay`` ms first.
Post-arrival time = the last rank's return minus the late rank's call (one node:
MPI_Wtime is one clock).  Each iteration runs every algorithm once, after a Barrier,
in an order that rotates from one iteration to the next, so that a load that drifts
touches them alike; one untimed iteration first builds the plans and touches the
memory.  The table gives the quartiles over the iterations; results are checked
against the exact sum, and the StragglAR runs against the delay: its early ranks must
end their ReduceScatter before the late rank calls, or phase 1 shows in its time.

The defaults are where StragglAR's gain is larger than the noise of a small machine: at
8 ranks it moves 9/7 of the buffer after the arrival against Ring's 14/8 (1.36x), at 4
only 4/3 against 6/4 (1.13x, within the spread of 4 ranks sharing 2 cores); at 64 MiB
the bytes decide more than each round's wait for its partner to be scheduled.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from .. import Allreduce, stats
from ..schedule.algorithms import NATIVE, SHOWN, STRAGGLAR
from ..schedule.units import format_size, parse_size, time_in

# native first (the ratios are to it), the straggler-aware ones last
ALGORITHMS = SHOWN


def one_call(comm, algo, send, recv, straggler, delay):
    """One timed call: (post-arrival seconds, the end of phase 1 on the early rank that
    ended it last, minus the late rank's call: negative when phase 1 was hidden)."""
    comm.Barrier()
    if comm.Get_rank() == straggler:
        time.sleep(delay)
    t_call = MPI.Wtime()
    if algo == NATIVE:
        comm.Allreduce(send, recv, MPI.SUM)
    else:
        Allreduce(comm, send, recv, MPI.SUM, algorithm=algo, straggler=straggler)
    t_ret = MPI.Wtime()
    p1 = t_call + stats(comm)["last"]["reduce_scatter"] if algo == STRAGGLAR else t_call
    calls = comm.allgather((t_call, t_ret, p1))
    arrival = calls[straggler][0]
    p1_end = max((p for r, (_, _, p) in enumerate(calls) if r != straggler), default=arrival)
    return max(r for _, r, _ in calls) - arrival, p1_end - arrival


def rotated(it):
    """The algorithms in iteration ``it``'s order: each takes every place in turn."""
    k = it % len(ALGORITHMS)
    return ALGORITHMS[k:] + ALGORITHMS[:k]


def run(comm, size, delay, iters):
    """(post-arrival seconds per algorithm, wrong elements per algorithm, StragglAR's
    phase 1 end after the late rank's call, per timed iteration)."""
    n, rank = comm.Get_size(), comm.Get_rank()
    count = size // 4
    send = ((np.arange(count) + rank) % 16).astype(np.float32)
    want = sum(((np.arange(count) + r) % 16).astype(np.float32) for r in range(n))
    recv = np.empty_like(send)
    times = {a: [] for a in ALGORITHMS}
    wrong = {a: 0 for a in ALGORITHMS}
    phase1 = []
    for it in range(iters + 1):            # the first iteration warms up
        for algo in rotated(it):
            t, p1 = one_call(comm, algo, send, recv, n - 1, delay)
            wrong[algo] += int(np.count_nonzero(recv != want))
            if it:
                times[algo].append(t)
                if algo == STRAGGLAR:
                    phase1.append(p1)
    return times, wrong, phase1


def quartiles(values):
    """(p25, median, p75) of ``values``."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    p25, med, p75 = statistics.quantiles(values, n=4, method="inclusive")
    return p25, med, p75


def table(times, wrong):
    """The result lines: quartiles in ms, the median's ratio to native's, wrong elements."""
    base = statistics.median(times[NATIVE])
    lines = [f"{'algorithm':<12}{'p25 ms':>9}{'median ms':>11}{'p75 ms':>9}"
             f"{'vs native':>11}{'#wrong':>8}"]
    for algo in ALGORITHMS:
        p25, med, p75 = quartiles(times[algo])
        lines.append(f"{algo:<12}{p25 * 1e3:>9.2f}{med * 1e3:>11.2f}{p75 * 1e3:>9.2f}"
                     f"{base / med:>10.2f}x{wrong[algo]:>8}")
    fastest = min(ALGORITHMS, key=lambda a: statistics.median(times[a]))
    lines.append(f"fastest by median: {fastest}")
    return lines


def hidden(phase1, delay):
    """A line on whether StragglAR's phase 1 ended before the late rank called."""
    late = sum(p > 0 for p in phase1)
    if not late:
        return (f"StragglAR's phase 1 ended before the late rank called in all {len(phase1)} "
                f"runs (at the latest {-max(phase1) * 1e3:.0f} ms before)")
    return (f"StragglAR's phase 1 was still running when the late rank called in {late} of "
            f"{len(phase1)} runs: a longer --delay than {delay * 1e3:.0f} ms would hide it")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mpiexec -n 8 python -m stragglar_mpi.bench.demo",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default="64M",
                   help="buffer size (default %(default)s)")
    p.add_argument("--delay", type=time_in("ms"), default="200",
                   help="straggler delay: a bare number in ms, or with a unit (0.3s) "
                        "(default %(default)s)")
    p.add_argument("--iters", type=int, default=15,
                   help="timed iterations after one warm-up (default %(default)s)")
    args = p.parse_args(argv)
    if args.iters < 1:
        p.error(f"--iters must be at least 1, got {args.iters}")
    if args.size < 4:
        p.error(f"--size must hold one float32 (4 bytes), got {args.size}")
    if not 0 <= args.delay < float("inf"):
        p.error(f"--delay must be a finite number of ms, at least 0; got {args.delay:g}")
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    if rank == 0:
        print(f"StragglAR demo: {n} ranks, {format_size(args.size)} float32 SUM, rank {n - 1} "
              f"late by {args.delay:.0f} ms, {args.iters} iterations after a warm-up\n"
              f"post-arrival = the last rank's return minus rank {n - 1}'s call; each iteration "
              f"runs every algorithm\nonce, in a rotating order; quartiles over the iterations; "
              f"results checked against the exact sum", flush=True)
    times, wrong, phase1 = run(comm, args.size, args.delay / 1e3, args.iters)
    if rank == 0:
        print("\n".join(table(times, wrong)))
        if n > 2:
            print(hidden(phase1, args.delay / 1e3))
    return 0 if not any(wrong.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
