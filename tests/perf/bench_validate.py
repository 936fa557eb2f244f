"""Cost of STRAGGLAR_VALIDATE=1 per call, in one run, interleaved.

    mpiexec -n 4 python tests/perf/bench_validate.py [--size 1MiB] [--iters 40]
"""
import argparse
import os
import statistics
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, configure
from stragglar_mpi.schedule.units import parse_size


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=parse_size("1MiB"))
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--algorithm", default="stragglar")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    send = np.ones(args.size // 4, np.float32)
    recv = np.empty_like(send)
    times = {"0": [], "1": []}
    for it in range(args.iters + 3):
        for mode in ("0", "1"):
            os.environ["STRAGGLAR_VALIDATE"] = mode
            configure()
            comm.Barrier()
            t0 = time.perf_counter()
            Allreduce(comm, send, recv, algorithm=args.algorithm, straggler=comm.Get_size() - 1)
            t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if it >= 3:
                times[mode].append(t)
    if comm.Get_rank() == 0:
        off, on = (statistics.median(times[m]) * 1e3 for m in ("0", "1"))
        print(f"{comm.Get_size()} ranks, {args.size} B, {args.algorithm}: median call {off:.3f} ms "
              f"without validation, {on:.3f} ms with ({(on / off - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
