"""An ordinary mpi4py program that switches to stragglar_mpi by one line.

    mpiexec -n 4 python examples/drop_in.py              # stragglar_mpi
    mpiexec -n 4 python examples/drop_in.py --native     # plain mpi4py, for comparison

Everything below the marked line is plain mpi4py: ``comm.Allreduce(sendbuf,
recvbuf, op)``, ``comm.Dup()`` and ``comm.Split()`` keep their meaning.  Only
the ``Allreduce`` of ``comm`` (and of every communicator made from it) changes.

With stragglar_mpi, rank 0 prints what each call ran and why
(``stats(comm)["last"]["why"]``): ``auto``, the default, takes the MPI's own AllReduce
below 4 MiB, and from there spends its first calls measuring the candidates before it
runs the fastest.
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Comm, stats


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=float, default=16.0,
                   help="buffer size in MiB of float32 (default 16; auto decides from 4)")
    p.add_argument("--iters", type=int, default=30, help="Allreduce calls to time (default 30)")
    p.add_argument("--delay-ms", type=float, default=50.0,
                   help="how late the last rank calls Allreduce each time (default 50)")
    p.add_argument("--native", action="store_true", help="keep plain mpi4py (skip the one-line switch)")
    args = p.parse_args()
    if args.iters < 1 or not args.mib > 0 or not args.delay_ms >= 0:
        p.error("--iters must be at least 1, --mib above 0 and --delay-ms at least 0")
    return args


def main():
    args = parse_args()
    comm = MPI.COMM_WORLD
    if not args.native:
        comm = Comm(comm)           # <- the one line: comm.Allreduce is now StragglAR's
    # ---- plain mpi4py from here on ----
    rank, size = comm.Get_rank(), comm.Get_size()
    count = max(1, int(args.mib * 2**20) // 4)
    # Integer-valued floats: the exact sum is known whatever the reduction order.
    send = np.full(count, rank + 1, dtype=np.float32)
    recv = np.empty_like(send)
    times = []
    for i in range(args.iters):
        comm.Barrier()
        if rank == size - 1:
            time.sleep(args.delay_ms / 1e3)   # the last rank arrives late
        t0 = MPI.Wtime()
        comm.Allreduce(send, recv, MPI.SUM)
        times.append(MPI.Wtime() - t0)
        if rank == 0 and not args.native:
            print(f"call {i}: {stats(comm)['last']['why']}")    # what ran, and why
    assert np.all(recv == size * (size + 1) / 2), "wrong AllReduce result"

    # In-place and sub-communicators work as with mpi4py.
    halves = comm.Split(color=rank % 2, key=rank)
    part = np.full(1000, 1.0)
    halves.Allreduce(MPI.IN_PLACE, part, MPI.SUM)
    assert np.all(part == halves.Get_size())

    # The time the last rank spends in Allreduce: what StragglAR shortens.
    last = comm.gather(float(np.median(times)), root=0)
    if rank == 0:
        kind = "mpi4py (native)" if args.native else "stragglar_mpi"
        print(f"{kind}: {size} ranks, {count * 4 / 2**20:.1f} MiB float32, result correct")
        print(f"median Allreduce time on the late rank {size - 1}: {last[-1] * 1e3:.2f} ms "
              f"(rank 0, which waits for it: {last[0] * 1e3:.2f} ms)")
        if not args.native:
            print("stragglar_mpi.stats:", stats(comm)["calls"])
    halves.Free()


if __name__ == "__main__":
    main()
