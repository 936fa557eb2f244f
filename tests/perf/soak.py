"""Long run: many calls with random sizes, datatypes, ops, late ranks, policies, algorithms.

    mpiexec -n 4 python tests/perf/soak.py --calls 100000 --max-bytes 4MiB

Every result is compared with comm.Allreduce on the same input.  Memory (VmRSS)
and the library's per-communicator state are read after a warm-up and at the
end; the run fails (exit 1) if any result was wrong or if anything grew.
A short version runs in CI (tests/mpi/test_reliability.py::test_short_soak...).
"""
import argparse
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats
from stragglar_mpi.core.lifetime import PROCESS
from stragglar_mpi.run import programs
from stragglar_mpi.call.allreduce import state_of
from stragglar_mpi.schedule.units import parse_size

CODES = ["f", "d", "i", "q", "b", "B", "h"]
OPS = [MPI.SUM, MPI.MAX, MPI.MIN, MPI.BXOR, MPI.PROD]
ALGOS = ["auto", "stragglar", "ring", "rhd", "direct", "native"]


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one_call(comm, c, rng, it, max_bytes):
    n, rank = c.Get_size(), c.Get_rank()
    code = CODES[rng.integers(len(CODES))]
    op = OPS[rng.integers(len(OPS))]
    if (op is MPI.BXOR and code in "fd") or (op is MPI.PROD and code in "bBh"):
        op = MPI.SUM
    count = int(rng.integers(0, max_bytes // np.dtype(code).itemsize + 1))
    policy = ["arrival", "predict", int(rng.integers(n)), None][rng.integers(4)]
    algo = ALGOS[rng.integers(len(ALGOS))]
    late, delay = int(rng.integers(n)), rng.uniform(0, 0.002)
    if rank == late:
        time.sleep(delay)
    send = ((np.arange(count) + rank * 3 + it) % 3).astype(code)
    recv = np.empty_like(send)
    Allreduce(c, send, recv, op, algorithm=algo, straggler=policy)
    ref = np.empty_like(send)
    comm.Allreduce(send, ref, op)
    return int(not np.array_equal(recv, ref))


def snapshot(c):
    state = state_of(c)
    return {"rss_mib": round(rss_mib(), 1),
            "arrival_tables": len(PROCESS.live("arrivals")), "fds": len(os.listdir("/proc/self/fd")),
            "history": len(state.history), "plans": sum(f.cache_info().currsize for f in (
                programs._flat, programs._hierarchical, programs._hring)),
            "scratch_mib": state._scratch.nbytes / 2**20}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=100000, help="timed calls (default 100000)")
    p.add_argument("--warmup", type=int, default=500, help="calls before the first memory reading")
    p.add_argument("--max-bytes", type=parse_size, default=parse_size("4MiB"), help="largest buffer")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    c = comm.Dup()
    rng = np.random.default_rng(args.seed)       # the same draws on every rank
    errors = sum(one_call(comm, c, rng, it, args.max_bytes) for it in range(args.warmup))
    start, t0 = snapshot(c), time.perf_counter()
    for it in range(args.calls):
        errors += one_call(comm, c, rng, it, args.max_bytes)
        if comm.Get_rank() == 0 and (it + 1) % max(1, args.calls // 20) == 0:
            print(f"  {it + 1} calls, {time.perf_counter() - t0:.0f} s, rss {rss_mib():.0f} MiB",
                  file=sys.stderr, flush=True)
    wall, end = time.perf_counter() - t0, snapshot(c)
    errors = comm.allreduce(errors)
    grew = (end["rss_mib"] - start["rss_mib"] > 64
            or end["arrival_tables"] > start["arrival_tables"] or end["fds"] > start["fds"])
    if comm.Get_rank() == 0:
        print(f"ranks {comm.Get_size()}  calls {args.calls}  wall {wall:.1f} s  errors {errors}")
        print(f"start {start}\nend   {end}")
        print(f"calls by algorithm: {stats(c)['calls']}")
    return 1 if errors or grew else 0


if __name__ == "__main__":
    sys.exit(main())
