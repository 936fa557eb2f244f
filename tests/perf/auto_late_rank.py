"""How often "auto" takes StragglAR with one given rank late: the issue's check
(4 ranks on 2 emulated nodes, 16 MiB, rank LATE late by 150 ms, the last 10 of 20 calls).

    MPIR_CVAR_ODD_EVEN_CLIQUES=1 UCX_TLS=tcp,self mpiexec -n 4 python tests/perf/auto_late_rank.py --late 0

Prints what each call ran (N = native, S<r> = StragglAR with straggler r) and the count.
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats
from stragglar_mpi.schedule.units import parse_size


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--late", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=150.0)
    p.add_argument("--size", type=parse_size, default=parse_size("16MiB"))
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    send = np.ones(args.size // 4, np.float32)
    recv = np.empty_like(send)
    picks = []
    for _ in range(args.calls):
        comm.Barrier()
        if comm.Get_rank() == args.late:
            time.sleep(args.delay_ms / 1e3)
        Allreduce(comm, send, recv)
        last = stats(comm)["last"]
        picks.append(f"S{last['straggler']}" if last["algorithm"] == "stragglar" else "N")
    if comm.Get_rank() == 0:
        tail = picks[-10:]
        print(f"late rank {args.late}: {' '.join(picks)}  | StragglAR in the last 10: "
              f"{sum(p == f'S{args.late}' for p in tail)} with the late rank as straggler, "
              f"{sum(p.startswith('S') for p in tail)} in all", flush=True)


if __name__ == "__main__":
    main()
