"""What arrival tracking costs per call: the notices alone ("record", what a sampled
"auto" call or a call under STRAGGLAR_TIMEOUT pays) and the notices plus the
coordinator's answer ("roles", what straggler="arrival" pays). No data moves;
every rank enters together after a Barrier, so the figure is the work itself,
not a wait for a late rank.

    mpiexec -n 8 python tests/perf/bench_arrival.py [--iters 200]
    MPIR_CVAR_NUM_CLIQUES=4 UCX_TLS=tcp,self mpiexec -n 16 python tests/perf/bench_arrival.py

Prints one line: ranks, nodes, then the median per call in microseconds (the slowest
rank's time of each call) for "record" and "roles", and the setup time.
"""
import argparse
import statistics
import time

from mpi4py import MPI

from stragglar_mpi.decide import roles as _roles
from stragglar_mpi.call.allreduce import state_of


def nodes(comm):
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    leader = node.allreduce(comm.Get_rank(), op=MPI.MIN)
    node.Free()
    return len(set(comm.allgather(leader)))


def timed(comm, state, kind, iters):
    n = comm.Get_size()
    name, tracked = ("ring", True) if kind == "record" else ("stragglar", False)
    samples = []
    for it in range(iters + 5):
        comm.Barrier()
        t0 = time.perf_counter()
        _roles.roles(state, name, "arrival", 8, n, tracked=tracked)
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if it >= 5:
            samples.append(t)
    return statistics.median(samples) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=200)
    args = p.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    comm.Barrier()
    t0 = time.perf_counter()
    state = state_of(comm)
    setup = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX) * 1e3
    record, roles = (timed(comm, state, kind, args.iters) for kind in ("record", "roles"))
    count = nodes(comm)
    if comm.Get_rank() == 0:
        print(f"ranks {comm.Get_size():3d}  nodes {count}  record {record:8.1f} us  "
              f"roles {roles:8.1f} us  setup {setup:7.1f} ms", flush=True)


if __name__ == "__main__":
    main()
