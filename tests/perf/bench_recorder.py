"""What the flight recorder and STRAGGLAR_TIMEOUT cost a native call, against the A/A spread.

    mpiexec -n 2 python tests/perf/bench_recorder.py [--size 8] [--calls 500] [--batches 15]

Variants, in a rotated order per batch, each batch after a Barrier, ``--calls`` calls:
mpi4py's own ``comm.Allreduce`` twice (``native A`` and ``native A'``: their difference is
the A/A spread of this machine), ``Allreduce(comm, ...)`` with no timeout (one
MPI_Allreduce from C, the call recorded) and ``Allreduce`` under ``STRAGGLAR_TIMEOUT=600``
(an MPI_Iallreduce tested in C, recorded).  A call's time is its batch's time over
``--calls``; the table shows the median over the batches, the quartiles, and each
variant's median over native A's.
"""
import argparse
import os
import statistics
import time

import numpy as np
from mpi4py import MPI

import stragglar_mpi
from stragglar_mpi import Allreduce

VARIANTS = ("native A", "native A'", "Allreduce", "Allreduce, timeout 600 s")


def batch(comm, variant, send, recv, calls):
    timed = variant.endswith("600 s")
    if variant.startswith("Allreduce"):
        os.environ.pop("STRAGGLAR_TIMEOUT", None)
        if timed:
            os.environ["STRAGGLAR_TIMEOUT"] = "600"
        stragglar_mpi.configure()
        Allreduce(comm, send, recv)            # binds the call under these settings
    comm.Barrier()
    t = time.perf_counter()
    if variant.startswith("native"):
        for _ in range(calls):
            comm.Allreduce(send, recv)
    else:
        for _ in range(calls):
            Allreduce(comm, send, recv)
    return (time.perf_counter() - t) / calls


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=8, help="bytes (float32 elements x 4; default 8)")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--batches", type=int, default=15)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    send = np.ones(max(a.size // 4, 1), np.float32)
    recv = np.empty_like(send)
    times = {v: [] for v in VARIANTS}
    for b in range(a.batches + 1):                # the first batch warms up
        order = VARIANTS[b % 4:] + VARIANTS[:b % 4]
        for v in order:
            t = comm.allreduce(batch(comm, v, send, recv, a.calls), MPI.MAX)
            if b:
                times[v].append(t)
    if comm.Get_rank() == 0:
        base = statistics.median(times["native A"])
        print(f"{comm.Get_size()} ranks, {send.nbytes} B, {a.batches} batches of {a.calls} calls "
              f"({MPI.Get_library_version().splitlines()[0].strip()})")
        print(f"{'variant':<26}{'median us':>10}{'p25':>8}{'p75':>8}{'/ native A':>12}")
        for v, ts in times.items():
            q = statistics.quantiles(ts, n=4)
            print(f"{v:<26}{statistics.median(ts) * 1e6:>10.3f}{q[0] * 1e6:>8.3f}{q[2] * 1e6:>8.3f}"
                  f"{statistics.median(ts) / base:>12.3f}")


if __name__ == "__main__":
    main()
