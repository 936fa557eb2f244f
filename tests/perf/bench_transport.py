"""Post-arrival time of StragglAR's plan driven by the caller's thread (``Allreduce``) and by
the progress thread (``Iallreduce`` + ``Wait``), native comm.Allreduce beside them.

    mpiexec -n 8 python tests/perf/bench_transport.py [--iters 20]

For each size the three variants are interleaved in every iteration, so noise
from the machine hits all of them alike.  The straggler (last rank) sleeps long
enough to hide phase 1.  Two times per call:
  call: post-arrival = the last rank's return - the straggler's call (what a user waits);
  plan: the last rank's end of the plan - the straggler's start of it (what the compiled
        interpreter does, stamped by its round hook: the same machine either way; the
        rest of the call is the argument checks and bookkeeping, and the hand-over
        to and from the progress thread).
"""
import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, Iallreduce
from stragglar_mpi.run import execute as _execute

SIZES = [8, 4 << 10, 64 << 10, 1 << 20, 16 << 20]
VARIANTS = ["native", "blocking", "nonblocking"]


class PlanClock:
    """The round hook of every plan (run/execute.py ``ROUND_HOOK``): notes when this rank
    starts its plan's first round and ends its last (``begin``/``end``)."""

    def __init__(self):
        self.reset()
        _execute.ROUND_HOOK = self

    def __call__(self, plan, datatype):
        return self

    def begin(self, rnd):
        if self.start < 0:
            self.start = MPI.Wtime()

    def end(self, rnd):
        self.end_at = MPI.Wtime()

    def reset(self):
        self.start, self.end_at = -1.0, 0.0

    def post_arrival(self, comm, straggler):
        marks = comm.allgather((self.start, self.end_at))
        return max(e for _, e in marks) - marks[straggler][0]


def one_call(comm, variant, send, recv, straggler, delay, clock):
    comm.Barrier()
    clock.reset()
    if comm.Get_rank() == straggler:
        time.sleep(delay)
    t_call = MPI.Wtime()
    if variant == "native":
        comm.Allreduce(send, recv, MPI.SUM)
    elif variant == "blocking":
        Allreduce(comm, send, recv, MPI.SUM, algorithm="stragglar", straggler=straggler)
    else:
        Iallreduce(comm, send, recv, MPI.SUM, algorithm="stragglar", straggler=straggler).Wait()
    t_ret = MPI.Wtime()
    calls = comm.allgather((t_call, t_ret))
    return max(r for _, r in calls) - calls[straggler][0]


def measure(comm, nbytes, iters, clock):
    n, rank = comm.Get_size(), comm.Get_rank()
    count = max(nbytes // 4, 1)
    send = ((np.arange(count) + rank) % 8).astype(np.float32)
    recv = np.empty_like(send)
    delay = 0.005 + nbytes / 200e6          # hides the ReduceScatter on this machine
    times = {v: [] for v in VARIANTS}
    plan = {v: [] for v in VARIANTS[1:]}
    for it in range(iters + 2):             # two warm-up rounds
        for variant in VARIANTS:
            t = one_call(comm, variant, send, recv, n - 1, delay, clock)
            p = clock.post_arrival(comm, n - 1) if variant != "native" else None
            if it >= 2:
                times[variant].append(t)
                if p is not None:
                    plan[variant].append(p)
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
        print(f"{'bytes':>10} {'native':>10} {'blocking':>10} {'nonblock':>10} {'nb/b':>12}"
              f" {'blocking':>10} {'nonblock':>10} {'nb/b':>12}")
    for nbytes in SIZES:
        iters = args.iters if nbytes <= (1 << 20) else max(3, args.iters // 4)
        med, plan = measure(comm, nbytes, iters, clock)
        if comm.Get_rank() == 0:
            nat, bl, nb = (med[v] * 1e6 for v in VARIANTS)
            pbl, pnb = (plan[v] * 1e6 for v in VARIANTS[1:])
            print(f"{nbytes:>10} {nat:>10.0f} {bl:>10.0f} {nb:>10.0f} {nb / bl:>12.2f}"
                  f" {pbl:>10.0f} {pnb:>10.0f} {pnb / pbl:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
