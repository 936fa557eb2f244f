"""What "auto" costs over a job's first calls with a persistent straggler, against each
fixed algorithm, in one run: every algorithm has a communicator of its own (a Dup, so
auto starts with no history), and call i runs every algorithm once, the late rank
sleeping before each, the order rotating, so a machine whose speed drifts touches all
alike.  A call's time is the late rank's, from its call to the end of a Barrier after
it (every rank has returned): the time after the arrival, plus one Barrier.

    tests/cluster/box mpiexec -hosts n1:4,n2:4 -n 8 python tests/perf/auto_first_calls.py \\
        --size 16MiB --calls 50 --delay-ms 500 -a hierarchical,hring,rhd,native

Prints each algorithm's total over the calls and median of the last --tail calls, auto's
ratios to the fastest fixed one, and what auto ran call by call (first letters).
"""
import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats
from stragglar_mpi.schedule.algorithms import has_roles
from stragglar_mpi.schedule.units import parse_size


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=parse_size("16MiB"), help="buffer (default 16MiB)")
    p.add_argument("--calls", type=int, default=50, help="calls of each algorithm (default 50)")
    p.add_argument("--tail", type=int, default=20, help="the steady state: the last calls (default 20)")
    p.add_argument("--delay-ms", type=float, default=500.0, help="the late rank's sleep before each call")
    p.add_argument("--late", type=int, default=None, help="the late rank (default: the last)")
    p.add_argument("-a", "--algorithms", default="hierarchical,hring,rhd,native",
                   help="the fixed algorithms auto is held against (default hierarchical,hring,rhd,native)")
    args = p.parse_args()
    world = MPI.COMM_WORLD
    late = world.Get_size() - 1 if args.late is None else args.late
    names = ["auto"] + [a for a in args.algorithms.split(",") if a and a != "auto"]
    comms = {name: world.Dup() for name in names}
    send = np.ones(args.size // 4, np.float32)
    recv = np.empty_like(send)
    times = {name: [] for name in names}
    ran = []
    for i in range(args.calls):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            comm = comms[name]
            comm.Barrier()
            if comm.Get_rank() == late:
                time.sleep(args.delay_ms / 1e3)
            t0 = MPI.Wtime()
            Allreduce(comm, send, recv, MPI.SUM, algorithm=name,
                      **({"straggler": late} if has_roles(name) else {}))
            comm.Barrier()
            times[name].append(MPI.Wtime() - t0)
            if recv[0] != world.Get_size():
                raise SystemExit(f"wrong result from {name}: {recv[0]}")
            if name == "auto":
                ran.append(stats(comm)["last"].get("algorithm", "?"))
        if world.Get_rank() == late and (i + 1) % 10 == 0:
            print(f"[{i + 1}/{args.calls}]", flush=True)
    if world.Get_rank() == late:
        report(args, names, times, ran)
    for comm in comms.values():
        comm.Free()


def report(args, names, times, ran):
    print(f"# {MPI.COMM_WORLD.Get_size()} ranks, {args.size} B, rank late by {args.delay_ms:g} ms, "
          f"{args.calls} calls; time = the late rank's call to the Barrier after it")
    print(f"{'algorithm':>14} {'total s':>9} {'median of last ' + str(args.tail) + ' ms':>24}")
    tail = {name: statistics.median(times[name][-args.tail:]) for name in names}
    for name in names:
        print(f"{name:>14} {sum(times[name]):9.3f} {tail[name] * 1e3:24.1f}")
    fixed = [n for n in names if n != "auto"]
    best_total = min(fixed, key=lambda n: sum(times[n]))
    best_tail = min(fixed, key=lambda n: tail[n])
    print(f"auto total / fastest fixed ({best_total}): {sum(times['auto']) / sum(times[best_total]):.2f}x")
    print(f"auto last {args.tail} / fastest fixed ({best_tail}): {tail['auto'] / tail[best_tail]:.2f}x")
    print("auto ran: " + " ".join(ran))


if __name__ == "__main__":
    main()
