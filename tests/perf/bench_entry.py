"""What the drop-in costs per call: native mpi4py against ``Allreduce`` and ``Comm.Allreduce``.

    mpiexec -n 2 python tests/perf/bench_entry.py [--sizes 8,4K] [--calls 200] [--rounds 30]
    mpiexec -n 2 python tests/perf/bench_entry.py --omb [--max-size 1M] [--iters 1000] [--skip 100]

Entry mode: for every buffer form mpi4py accepts and every size, batches of
``--calls`` calls of each variant, in a rotated order, each batch after a Barrier;
a call's time is its batch's time over ``--calls``, the median over ``--rounds``
batches.  At these sizes ``auto`` takes the native AllReduce, so the difference
from native is what the entry path costs.

``--omb``: a loop in the manner of OSU's OMB-Py ``osu_allreduce`` (it is an
equivalent written here, not OMB-Py itself): for each size from 8 B doubling to
``--max-size``, ``--skip`` warm-up calls, then ``--iters`` timed calls of
``comm.Allreduce([s, count, MPI.FLOAT], [r, count, MPI.FLOAT], op=MPI.SUM)`` after a
Barrier; the latency is the average over the calls, averaged over the ranks.
Native ``MPI.COMM_WORLD`` and ``stragglar_mpi.Comm(MPI.COMM_WORLD)`` alternate,
``--reps`` times per size; the median of the repetitions is shown.
"""
import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, Comm
from stragglar_mpi.schedule.units import parse_size

VARIANTS = ("native", "Allreduce", "Comm.Allreduce")


def forms(send, recv):
    """(name, sendbuf, recvbuf) for every buffer form, over the same memory."""
    n = recv.size
    return [
        ("array", send, recv),
        ("[buf, dt]", [send, MPI.FLOAT], [recv, MPI.FLOAT]),
        ("[buf, count, dt]", [send, n, MPI.FLOAT], [recv, n, MPI.FLOAT]),
        ("[buf, (count, displ), dt]", [send, (n, 0), MPI.FLOAT], [recv, (n, 0), MPI.FLOAT]),
        ("[buf, 'f']", [send, "f"], [recv, "f"]),
        ("IN_PLACE", MPI.IN_PLACE, recv),
        ("None", None, recv),
    ]


def callers(comm):
    wrapped = Comm(comm)
    return {
        "native": comm.Allreduce,
        "Allreduce": lambda s, r, op: Allreduce(comm, s, r, op),
        "Comm.Allreduce": wrapped.Allreduce,
    }


def batch(comm, call, send, recv, calls):
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        call(send, recv, MPI.SUM)
    return (time.perf_counter() - t0) / calls


def entry(comm, args):
    call = callers(comm)
    rows = []
    for size in args.sizes:
        send = np.ones(max(size // 4, 1), np.float32)
        recv = np.empty_like(send)
        for name, s, r in forms(send, recv):
            times = {v: [] for v in VARIANTS}
            for rnd in range(args.rounds + 2):
                for k in range(len(VARIANTS)):
                    v = VARIANTS[(k + rnd) % len(VARIANTS)]
                    t = batch(comm, call[v], s, r, args.calls)
                    if rnd >= 2:
                        times[v].append(t)
            rows.append((size, name, {v: statistics.median(t) for v, t in times.items()}))
    if comm.Get_rank() == 0:
        print(f"{comm.Get_size()} rank(s); median us per call over {args.rounds} batches of {args.calls}")
        print(f"{'size':>6} {'form':<27} {'native':>7} {'Allreduce':>10} {'diff':>6} {'ratio':>6} "
              f"{'Comm':>7} {'diff':>6} {'ratio':>6}")
        for size, name, med in rows:
            nat, fn, cm = (med[v] * 1e6 for v in VARIANTS)
            print(f"{size:>6} {name:<27} {nat:7.2f} {fn:10.2f} {fn - nat:+6.2f} {fn / nat:6.2f} "
                  f"{cm:7.2f} {cm - nat:+6.2f} {cm / nat:6.2f}")


def omb_latency(comm, size, iters, skip):
    """One OMB-style measurement: average us per call on this rank."""
    count = max(size // 4, 1)
    s, r = np.ones(count, np.float32), np.empty(count, np.float32)
    comm.Barrier()
    for i in range(iters + skip):
        if i == skip:
            comm.Barrier()
            t_start = MPI.Wtime()
        comm.Allreduce([s, count, MPI.FLOAT], [r, count, MPI.FLOAT], op=MPI.SUM)
    return (MPI.Wtime() - t_start) / iters * 1e6


def omb(world, args):
    wrapped = Comm(world)
    sizes, size = [], 8
    while size <= args.max_size:
        sizes.append(size)
        size *= 2
    if world.Get_rank() == 0:
        print(f"OMB-style allreduce, {world.Get_size()} ranks, {args.iters} iterations "
              f"({args.skip} warm-up), median of {args.reps} repetitions; avg latency us")
        print(f"{'size':>8} {'native':>9} {'Comm':>9} {'Comm/native':>12}")
    for size in sizes:
        got = {"native": [], "Comm": []}
        for rep in range(args.reps):
            order = (("native", world), ("Comm", wrapped))[::1 if rep % 2 == 0 else -1]
            for name, comm in order:
                mine = omb_latency(comm, size, args.iters, args.skip)
                got[name].append(world.allreduce(mine) / world.Get_size())
        if world.Get_rank() == 0:
            nat, ours = statistics.median(got["native"]), statistics.median(got["Comm"])
            print(f"{size:>8} {nat:9.2f} {ours:9.2f} {ours / nat:12.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="8,4K", type=lambda t: [parse_size(x) for x in t.split(",")],
                   help="entry mode: buffer sizes in bytes (float32), comma separated")
    p.add_argument("--calls", type=int, default=200, help="entry mode: calls per batch")
    p.add_argument("--rounds", type=int, default=30, help="entry mode: batches per variant")
    p.add_argument("--omb", action="store_true", help="the OMB-style allreduce loop instead")
    p.add_argument("--max-size", type=parse_size, default=parse_size("1M"), help="OMB: largest size")
    p.add_argument("--iters", type=int, default=1000, help="OMB: timed iterations per size")
    p.add_argument("--skip", type=int, default=100, help="OMB: warm-up iterations per size")
    p.add_argument("--reps", type=int, default=5, help="OMB: repetitions per size and variant")
    args = p.parse_args()
    for name in ("calls", "rounds", "iters", "reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    (omb if args.omb else entry)(MPI.COMM_WORLD, args)


if __name__ == "__main__":
    main()
