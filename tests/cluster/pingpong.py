"""Ping-pong between rank 0 and rank 1 (put them on two hosts): GB/s one way, median of --iters.

    tests/cluster/box mpiexec -hosts n1:1,n2:1 -n 2 .venv/bin/python tests/cluster/pingpong.py --mib 16
"""
import argparse
import statistics

import numpy as np
from mpi4py import MPI

p = argparse.ArgumentParser()
p.add_argument("--mib", type=float, default=16)
p.add_argument("--iters", type=int, default=7)
args = p.parse_args()
comm = MPI.COMM_WORLD
buf = np.zeros(int(args.mib * 2**20), np.uint8)
times = []
for it in range(args.iters + 1):
    comm.Barrier()
    t = MPI.Wtime()
    if comm.rank == 0:
        comm.Send(buf, 1)
        comm.Recv(buf, 1)
    elif comm.rank == 1:
        comm.Recv(buf, 0)
        comm.Send(buf, 0)
    if it:
        times.append((MPI.Wtime() - t) / 2)
if comm.rank == 0:
    med = statistics.median(times)
    print(f"pingpong {args.mib:g} MiB: {med * 1e3:.1f} ms one way, {buf.nbytes / med / 1e9:.2f} GB/s "
          f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f} ms)")
