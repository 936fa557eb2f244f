"""Post-arrival time of StragglAR with each transport, native comm.Allreduce beside them.

    mpiexec -n 8 python tests/perf/bench_transport.py [--iters 20]

For each size the three variants are interleaved in every iteration, so noise
from the machine hits all of them alike.  The straggler (last rank) sleeps long
enough to hide phase 1.  Two times per call:
  call: post-arrival = the last rank's return - the straggler's call (what a user waits);
  plan: the last rank's end of the plan - the straggler's start of it (what the
        transport does: the argument checks and bookkeeping before and after it are
        the same Python code for both transports).
"""
import argparse
import os
import statistics

import numpy as np
from mpi4py import MPI

from stragglar_mpi import configure
from stragglar_mpi.run import transport as _transport
from stragglar_mpi.bench.demo import one_call

SIZES = [8, 4 << 10, 64 << 10, 1 << 20, 16 << 20]
VARIANTS = [("native", None), ("stragglar", "python"), ("stragglar", "cython")]


class PlanClock:
    """Wraps the plan runner (a generator of steps) to note when this rank starts and
    ends its plan."""

    def __init__(self):
        self.start = self.end = 0.0
        self.run = _transport.run
        _transport.run = self

    def __call__(self, *args, **kwargs):
        self.start = MPI.Wtime()
        try:
            return (yield from self.run(*args, **kwargs))
        finally:
            self.end = MPI.Wtime()

    def post_arrival(self, comm, straggler):
        marks = comm.allgather((self.start, self.end))
        return max(e for _, e in marks) - marks[straggler][0]


def measure(comm, nbytes, iters, clock):
    n, rank = comm.Get_size(), comm.Get_rank()
    count = max(nbytes // 4, 1)
    send = ((np.arange(count) + rank) % 8).astype(np.float32)
    recv = np.empty_like(send)
    delay = 0.005 + nbytes / 200e6          # hides the ReduceScatter on this machine
    times = {v: [] for v in VARIANTS}
    plan = {v: [] for v in VARIANTS[1:]}
    for it in range(iters + 2):             # two warm-up rounds
        for algo, transport in VARIANTS:
            if transport:
                os.environ["STRAGGLAR_TRANSPORT"] = transport
                configure()
            t = one_call(comm, algo, send, recv, n - 1, delay)
            p = clock.post_arrival(comm, n - 1) if transport else None
            if it >= 2:
                times[(algo, transport)].append(t)
                if transport:
                    plan[(algo, transport)].append(p)
    return ({v: statistics.median(t) for v, t in times.items()},
            {v: statistics.median(t) for v, t in plan.items()})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size (fewer above 1 MiB)")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    clock = PlanClock()
    if comm.Get_rank() == 0:
        print(f"{comm.Get_size()} ranks, float32 SUM, median post-arrival time in microseconds")
        print(f"{'':>10} {'':>10} {'--------- call ---------':>35} {'--------- plan ---------':>35}")
        print(f"{'bytes':>10} {'native':>10} {'python':>10} {'cython':>10} {'cy/py':>12}"
              f" {'python':>10} {'cython':>10} {'cy/py':>12}")
    for nbytes in SIZES:
        iters = args.iters if nbytes <= (1 << 20) else max(3, args.iters // 4)
        med, plan = measure(comm, nbytes, iters, clock)
        if comm.Get_rank() == 0:
            nat, py, cy = (med[v] * 1e6 for v in VARIANTS)
            ppy, pcy = (plan[v] * 1e6 for v in VARIANTS[1:])
            print(f"{nbytes:>10} {nat:>10.0f} {py:>10.0f} {cy:>10.0f} {cy / py:>12.2f}"
                  f" {ppy:>10.0f} {pcy:>10.0f} {pcy / ppy:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
