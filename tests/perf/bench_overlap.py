"""Overlap: does phase 1 progress in the background while the early ranks compute?

    mpiexec -n 4 python tests/perf/bench_overlap.py [--size 16M] [--delays 100,200] [--iters 10]
        [--compute 0.5]

Every iteration starts at a Barrier (t0).  The straggler (the last rank) sleeps D ms
and then calls; the early ranks call at once and, for the nonblocking forms, "compute"
for D ms before they Wait: by default a ``time.sleep`` (it releases the GIL and the
core, as a GPU kernel would); with ``--compute F``, NumPy work (``np.sin`` over 4 K
floats, again and again: Python between the calls holds the GIL, NumPy inside them
does not) for the first F of every 10 ms and a sleep for the rest, as a Python
training loop does.  Per method, the median over iterations of the slowest
early rank's time after the straggler arrived:

- ``blocking``: ``Allreduce`` at t0; its return minus t0 + D (post-arrival);
- ``Iallreduce``: ``Iallreduce`` at t0, sleep D, ``Wait``: the time in Wait;

for StragglAR (straggler = last rank) and for native MPI (mpi4py's own calls), side
by side in one run, methods interleaved within each iteration.  ``ratio`` is the
Iallreduce Wait over the blocking StragglAR post-arrival (the target: <= 1.3x);
``phase 1`` is how long the background phase 1 took (stats ``reduce_scatter``).
"""
import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, Iallreduce, stats


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def compute(seconds, busy):
    """``seconds`` of the early ranks' work: NumPy for ``busy`` of every 10 ms (0: sleep)."""
    end = time.perf_counter() + seconds
    if not busy:
        time.sleep(seconds)
        return
    x = np.linspace(0.0, 1.0, 1 << 12)
    while (now := time.perf_counter()) < end:
        slot_busy = min(now + 0.010 * busy, end)
        while time.perf_counter() < slot_busy:
            x = np.sin(x)
        rest = min(now + 0.010, end) - time.perf_counter()
        if rest > 0:
            time.sleep(rest)


def once(comm, method, send, recv, delay, busy=0.0):
    """(seconds after the straggler's arrival on this rank, result correct)."""
    n, rank = comm.Get_size(), comm.Get_rank()
    late = rank == n - 1
    recv[:] = -1
    comm.Barrier()
    t0 = time.perf_counter()
    if late:
        time.sleep(delay)
    if method == "stragglar blocking":
        Allreduce(comm, send, recv, MPI.SUM, straggler=n - 1, algorithm="stragglar")
        after = time.perf_counter() - (t0 + delay)
    elif method == "native blocking":
        MPI.Intracomm.Allreduce(comm, send, recv, MPI.SUM)
        after = time.perf_counter() - (t0 + delay)
    else:
        start = Iallreduce if method == "stragglar Iallreduce" else MPI.Intracomm.Iallreduce
        kwargs = {"straggler": n - 1, "algorithm": "stragglar"} if start is Iallreduce else {}
        request = start(comm, send, recv, MPI.SUM, **kwargs)
        if not late:
            compute(delay, busy)                # the early ranks' work
        t_wait = time.perf_counter()
        request.Wait()
        after = time.perf_counter() - t_wait
    return after, bool(np.all(recv == n * (n + 1) / 2))


WARMUP = 4      # iterations left out: the first sets the communicator up, then caches fill
METHODS = ["stragglar blocking", "stragglar Iallreduce", "native blocking", "native Iallreduce"]


def measure(comm, count, delay, iters, busy=0.0):
    n, rank = comm.Get_size(), comm.Get_rank()
    send = np.full(count, rank + 1.0, np.float32)
    recv = np.empty_like(send)
    times = {m: [] for m in METHODS}
    phase1, wrong = [], 0
    for it in range(iters + WARMUP):
        for method in METHODS:
            after, ok = once(comm, method, send, recv, delay, busy)
            wrong += not ok
            slowest = comm.allreduce(after if rank < n - 1 else 0.0, op=MPI.MAX)
            if it >= WARMUP:
                times[method].append(slowest)
            if it >= WARMUP and method == "stragglar Iallreduce" and rank < n - 1:
                phase1.append(stats(comm)["last"]["reduce_scatter"])
    p1 = comm.allreduce(max(phase1) if phase1 else 0.0, op=MPI.MAX)
    return {m: statistics.median(v) * 1e3 for m, v in times.items()}, p1 * 1e3, comm.allreduce(wrong)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=size_arg, default=16 << 20, help="bytes of float32 (16M)")
    p.add_argument("--delays", default="100,200", help="D in ms, comma-separated")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--compute", type=float, default=0.0,
                   help="fraction of every 10 ms the early ranks compute with NumPy (0: they sleep)")
    args = p.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    if comm.Get_size() < 2:
        raise SystemExit("bench_overlap needs at least 2 ranks (early ranks and the straggler)")
    count = args.size // 4
    if comm.Get_rank() == 0:
        work = f"NumPy {args.compute:.0%} of every 10 ms" if args.compute else "a sleep"
        print(f"{comm.Get_size()} ranks, {args.size / 2**20:g} MiB float32, straggler rank "
              f"{comm.Get_size() - 1}, {args.iters} iterations, early ranks' work: {work}; ms after "
              "the straggler arrived (median of the slowest early rank)")
        print(f"{'D ms':>6} {'stragglar blocking':>19} {'stragglar Iallreduce':>21} {'ratio':>6} "
              f"{'native blocking':>16} {'native Iallreduce':>18} {'phase 1 ms':>11} {'#wrong':>7}")
    for delay in (float(d) / 1e3 for d in args.delays.split(",")):
        med, p1, wrong = measure(comm, count, delay, args.iters, args.compute)
        if comm.Get_rank() == 0:
            ratio = med["stragglar Iallreduce"] / med["stragglar blocking"]
            print(f"{delay * 1e3:6.0f} {med['stragglar blocking']:19.2f} {med['stragglar Iallreduce']:21.2f} "
                  f"{ratio:5.2f}x {med['native blocking']:16.2f} {med['native Iallreduce']:18.2f} "
                  f"{p1:11.1f} {wrong:7d}", flush=True)
    comm.Free()


if __name__ == "__main__":
    main()
