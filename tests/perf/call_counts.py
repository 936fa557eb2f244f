"""How many Python-level calls a repeated Allreduce makes, and in which files.

    mpiexec -n 3 python tests/perf/call_counts.py [--show]

For each case (a fixed straggler and roles by arrival at 256 KiB, ``auto`` at 16 MiB):
the 10th of 10 calls, each after a Barrier, under ``sys.setprofile``; every "call" event
whose code is in the package counts (a generator's resume is one), the maximum over the
ranks; files are the package's Python files those events ran in (the compiled entry and
interpreter run no Python frames).  ``--show`` lists the calls of the rank that made the
most.  tests/mpi/test_call_path.py holds the budgets.
"""
import argparse
import collections
import os
import sys

import numpy as np
from mpi4py import MPI

import stragglar_mpi
from stragglar_mpi import Allreduce

PACKAGE = os.path.dirname(stragglar_mpi.__file__)
CASES = (("fixed", 256 << 10, {"algorithm": "stragglar", "straggler": 1}),
         ("arrival", 256 << 10, {"algorithm": "stragglar", "straggler": "arrival"}),
         ("auto", 16 << 20, {"algorithm": "auto"}))


def tenth_call(comm, nbytes, kwargs):
    """(file, function) of every package call event in the 10th of 10 calls on this rank."""
    x = np.ones(nbytes // 4, np.float32)
    y = np.empty_like(x)
    events = []

    def note(frame, event, _arg):
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            events.append((os.path.relpath(frame.f_code.co_filename, PACKAGE), frame.f_code.co_name))
    for i in range(10):
        comm.Barrier()
        if i == 9:
            sys.setprofile(note)
        try:
            Allreduce(comm, x, y, MPI.SUM, **kwargs)
        finally:
            sys.setprofile(None)
    return events


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--show", action="store_true", help="list the calls of the busiest rank")
    args = p.parse_args()
    for name, nbytes, kwargs in CASES:
        comm = MPI.COMM_WORLD.Dup()           # a communicator of its own: auto's history starts empty
        events = comm.gather(tenth_call(comm, nbytes, kwargs), root=0)
        comm.Free()
        if MPI.COMM_WORLD.Get_rank() != 0:
            continue
        most = max(events, key=len)
        files = max(len({f for f, _ in e}) for e in events)
        print(f"{name:8s} {nbytes >> 10:6d} KiB  calls {len(most):4d} (per rank {[len(e) for e in events]})"
              f"  files {files}", flush=True)
        if args.show:
            for (f, fn), k in collections.Counter(most).most_common():
                print(f"    {k:3d} {f}:{fn}")


if __name__ == "__main__":
    main()
