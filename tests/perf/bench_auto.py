"""What ``auto`` costs where it runs native: auto against comm.Allreduce, and comm.Allreduce twice.

    mpiexec -n 4 python tests/perf/bench_auto.py [--size 1MiB] [--iters 100] [--delay-ms 30]

Every iteration runs the three variants in a rotated order: native, native2 (the
same comm.Allreduce again: its ratio to native is this machine's noise) and
stragglar_mpi.Allreduce with the defaults (auto, roles by arrival).  The last
rank sleeps --delay-ms first (0: nobody late); time = the last rank's return
minus the late rank's call (the first call when nobody is late).
"""
import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats
from stragglar_mpi.schedule.units import parse_size

VARIANTS = ("native", "native2", "auto")


def quiet_barrier(comm):
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(50e-6)


def one(comm, variant, send, recv, delay):
    n, rank = comm.Get_size(), comm.Get_rank()
    quiet_barrier(comm)
    if delay and rank == n - 1:
        time.sleep(delay)
    t_call = MPI.Wtime()
    if variant == "auto":
        Allreduce(comm, send, recv)
    else:
        comm.Allreduce(send, recv)
    marks = comm.allgather((t_call, MPI.Wtime()))
    start = marks[n - 1][0] if delay else min(c for c, _ in marks)
    return max(r for _, r in marks) - start


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=parse_size("1MiB"), help="buffer size (float32)")
    p.add_argument("--iters", type=int, default=100, help="timed iterations (3 more warm up)")
    p.add_argument("--delay-ms", type=float, default=30.0, help="the last rank's delay; 0: nobody late")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    send = np.ones(max(args.size // 4, 1), np.float32)
    recv = np.empty_like(send)
    times = {v: [] for v in VARIANTS}
    for it in range(args.iters + 3):
        for k in range(len(VARIANTS)):
            v = VARIANTS[(k + it) % len(VARIANTS)]
            t = one(comm, v, send, recv, args.delay_ms / 1e3)
            if it >= 3:
                times[v].append(t)
    if comm.Get_rank() == 0:
        med = {v: statistics.median(t) for v, t in times.items()}
        ran = stats(comm)["calls"]
        print(f"{comm.Get_size()} ranks, {args.size} B float32, delay {args.delay_ms:g} ms, "
              f"{args.iters} iterations; auto ran {ran}")
        print("median ms: " + "  ".join(f"{v} {med[v] * 1e3:.3f}" for v in VARIANTS))
        print(f"native/native2 {med['native'] / med['native2']:.3f}   "
              f"native/auto {med['native'] / med['auto']:.3f}   "
              f"native2/auto {med['native2'] / med['auto']:.3f}")


if __name__ == "__main__":
    main()
