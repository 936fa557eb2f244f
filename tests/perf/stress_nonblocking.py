"""Hang hunter: new communicators whose first calls are nonblocking, many times over.

    mpiexec -n 3 python tests/perf/stress_nonblocking.py --rounds 1500 [--limit 120]

Each round takes a new communicator (a Dup or a Split of COMM_WORLD), starts 8
``Iallreduce`` of mixed algorithms on it with a blocking ``Allreduce`` after each (as
tests/mpi/test_nonblocking.py does once), waits for them in reverse order, checks every
result and frees the communicator.  The first nonblocking calls of a communicator are
where its setup happens (duplicates made while other calls run), so a rare hang in that
setup shows here.  A rank that is not done ``--limit`` seconds after the start prints
every thread's stack and aborts the job (exit 3).  Prints one line per rank at the end.
"""
import argparse
import faulthandler
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, Iallreduce

ALGOS = ["stragglar", "auto", "ring", "native"]


def one_round(world, it):
    rank = world.Get_rank()
    c = world.Dup() if it % 3 else world.Split(rank % 2, 0)
    n = c.Get_size()
    pending = []
    for k in range(8):
        send = np.full(3000 + k, rank + k, np.float64)
        recv = np.zeros_like(send)
        pending.append((Iallreduce(c, send, recv, algorithm=ALGOS[k % 4]), recv, k))
        blocking = np.full(100, float(k))
        Allreduce(c, MPI.IN_PLACE, blocking)
        assert np.all(blocking == k * n), (it, k, "blocking")
    members = c.Get_group().Translate_ranks(list(range(n)), world.Get_group())
    for request, recv, k in reversed(pending):
        request.Wait()
        assert np.all(recv == sum(r + k for r in members)), (it, k)
    c.Free()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before a rank gives up")
    parser.add_argument("--hold", type=int, default=0,
                        help="duplicates of COMM_WORLD held meanwhile (context ids in use, as "
                             "late in a long test run)")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    held = [world.Dup() for _ in range(args.hold)]
    done = threading.Event()

    def watchdog():
        if not done.wait(args.limit):
            print(f"rank {world.Get_rank()}: not done after {args.limit:g} s; its threads:",
                  file=sys.stderr, flush=True)
            faulthandler.dump_traceback(all_threads=True)
            world.Abort(3)

    threading.Thread(target=watchdog, daemon=True).start()
    t0 = time.perf_counter()
    for it in range(args.rounds):
        one_round(world, it)
    done.set()
    for c in held:
        c.Free()
    print(f"rank {world.Get_rank()}: {args.rounds} rounds in {time.perf_counter() - t0:.1f} s, "
          f"errors 0", flush=True)


if __name__ == "__main__":
    main()
