"""Per-round timeline of a scheduled algorithm after the straggler arrives.

    mpiexec -n 8 python -m stragglar_mpi.bench.rounds -s 32M --delay 300 -n 5 -a stragglar,rhd

Stamps the end of every round of the plan (per rank, on rank 0's clock) through the
interpreter's round hook (run/execute.py ``ROUND_HOOK``: ``end(round)``).  For each round
it prints when the last rank finished it (median over iterations, from the
straggler's call), how many ranks received data and how many bytes: enough to
see whether a round costs its slowest message (the alpha-beta model) or the
node's total copy throughput (a CPU-bound, oversubscribed node).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

from .. import Allreduce
from ..run import execute as _execute
from ..run.plan import COUNT, KIND, RECV, ROUND
from ..schedule.algorithms import ALGORITHMS, STRAGGLAR
from . import _clock
from ._args import _at_least, parse_delay, parse_size

_LOG = []


class _Stamps:
    """A plan's round hook that logs (round, end time, bytes received) as each round ends,
    after a (-1, start, 0) when the plan starts: setup is over."""

    def __init__(self, plan, datatype):
        rows, extent = plan.rows, datatype.Get_extent()[1]
        recvs = rows[rows[:, KIND] == RECV]
        self.received = {int(r): int(recvs[recvs[:, ROUND] == r][:, COUNT].sum()) * extent
                         for r in np.unique(rows[:, ROUND])}
        _LOG.append((-1, MPI.Wtime(), 0))

    def begin(self, rnd):
        pass

    def end(self, rnd):
        _LOG.append((rnd, MPI.Wtime(), self.received[rnd]))


def _stamps(plan, datatype):
    """The stamps of a plan that has rounds (None for an empty one: it never runs)."""
    return _Stamps(plan, datatype) if plan.rows.shape[0] else None


def timeline(comm, algorithm, count, delay, iters, straggler):
    """Rank 0: (post-arrival times, per-round end times [iters x rounds], bytes per round)."""
    send, recv = np.ones(count, np.float32), np.empty(count, np.float32)
    offset = _clock.offsets(comm)
    Allreduce(comm, send, recv, straggler=straggler, algorithm=algorithm)   # warm-up
    gathered = []
    for _ in range(iters):
        _LOG.clear()
        comm.Barrier()
        if comm.Get_rank() == straggler:
            time.sleep(delay)
        t_call = MPI.Wtime()
        Allreduce(comm, send, recv, straggler=straggler, algorithm=algorithm)
        t_ret = MPI.Wtime()
        log = [(r, t - offset, b) for r, t, b in _LOG]
        gathered.append(comm.gather((t_call - offset, t_ret - offset, log), root=0))
    return None if comm.Get_rank() != 0 else _tabulate(gathered, straggler)


def _tabulate(gathered, straggler):
    rounds = 1 + max(r for ranks in gathered for _, _, log in ranks for r, _, _ in log)
    ends, received = np.zeros((len(gathered), rounds)), np.zeros(rounds)
    setup = []
    active = np.zeros(rounds, dtype=int)
    post = []
    for i, ranks in enumerate(gathered):
        arrived = ranks[straggler][0]
        post.append(max(t_ret for _, t_ret, _ in ranks) - arrived)
        setup.append(next((t for r, t, _ in ranks[straggler][2] if r < 0), arrived) - arrived)
        for _, _, log in ranks:
            for r, t, b in log:
                if r < 0 or t < arrived:      # phase 1's rounds (before the arrival)
                    continue
                ends[i, r] = max(ends[i, r], t - arrived)
                if i == 0 and b:
                    received[r] += b
                    active[r] += 1
    return post, setup, ends, received, active


def report(algorithm, n, nbytes, post, setup, ends, received, active) -> str:
    med = np.median(ends, axis=0)
    lines = [f"{algorithm}, {n} ranks, {nbytes / 2**20:g} MiB: post-arrival median "
             f"{np.median(post) * 1e3:.1f} ms; bytes received after the arrival, all ranks: "
             f"{received.sum() / nbytes:.2f} x the buffer",
             f"  the straggler enters the executor {np.median(setup) * 1e3:.1f} ms after its call",
             "  round   ends(ms)  took(ms)  ranks  MiB in  node GB/s"]
    prev = 0.0
    for r, end in enumerate(med):
        took = max(end - prev, 1e-9)
        lines.append(f"  {r:5d} {end * 1e3:10.1f} {took * 1e3:9.1f} {active[r]:6d} "
                     f"{received[r] / 2**20:7.1f} {received[r] / took / 1e9:10.2f}")
        prev = end
    return "\n".join(lines)


def main(argv=None, comm=None) -> int:
    comm = MPI.COMM_WORLD if comm is None else comm
    p = argparse.ArgumentParser(prog="python -m stragglar_mpi.bench.rounds", description=__doc__.split("\n")[0])
    p.add_argument("-s", "--size", type=parse_size, default="32M", help="buffer size (float32)")
    p.add_argument("--delay", type=parse_delay, default="300",
                   help="the straggler's delay: a bare number in ms, or with a unit (50ms)")
    p.add_argument("-n", "--iters", type=_at_least(1), default=5, help="timed iterations")
    p.add_argument("-a", "--algorithms", default=STRAGGLAR,
                   help=f"comma-separated: {', '.join(ALGORITHMS)}")
    p.add_argument("--straggler", type=_at_least(0), default=None, help="the late rank (default: the last)")
    args = p.parse_args(argv)
    if args.straggler is not None and args.straggler >= comm.Get_size():
        p.error(f"--straggler {args.straggler} is not a rank of {comm.Get_size()}")
    unknown = [a for a in args.algorithms.split(",") if a not in ALGORITHMS]
    if unknown:
        p.error(f"unknown algorithm(s) {', '.join(unknown)}; choose from {', '.join(ALGORITHMS)}")
    _execute.ROUND_HOOK = _stamps       # every plan without a hook of its own is stamped
    n, straggler = comm.Get_size(), comm.Get_size() - 1 if args.straggler is None else args.straggler
    delay = args.delay.draw(np.random.default_rng(0), args.size)
    for algorithm in args.algorithms.split(","):
        out = timeline(comm, algorithm, args.size // 4, delay, args.iters, straggler)
        if out is not None:
            print(report(algorithm, n, args.size, *out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
