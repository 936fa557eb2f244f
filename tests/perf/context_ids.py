"""How many user communicators fit in one process, each used every way (blocking auto and
stragglar, Iallreduce, Allreduce_init), against plain duplicates that are not used.

    mpiexec -n 4 python tests/perf/context_ids.py [--limit 3000]

MPICH gives each communicator a context id from a fixed pool (about 2048 per process);
the first Dup that finds the pool empty raises.  A user communicator's cost in
communicators is the pool divided by how many fit.
"""
import argparse

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, Comm


def fill(world, used, limit):
    made, rank = [], world.Get_rank()
    try:
        for k in range(limit):
            c = Comm(world.Dup()) if used else world.Dup()
            made.append(c)
            if used:
                send, recv = np.full(64, rank + 1.0), np.zeros(64)
                c.Allreduce(send, recv, MPI.SUM)
                Allreduce(c, send, recv, algorithm="stragglar", straggler=k % world.Get_size())
                c.Iallreduce(send, recv, MPI.SUM).Wait()
                req = c.Allreduce_init(send, recv, MPI.SUM)
                req.Start()
                req.Wait()
                req.Free()
        return len(made), None
    except MPI.Exception as exc:
        return len(made), exc.Get_error_string().splitlines()[0]
    finally:
        for c in made:
            c.Free()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=3000)
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    plain, why_plain = fill(world, False, args.limit)
    ours, why_ours = fill(world, True, args.limit)
    if world.Get_rank() == 0:
        print(f"plain Dup: {plain} communicators ({why_plain or 'limit reached'})")
        print(f"Comm(Dup) used every way: {ours} ({why_ours or 'limit reached'})")
        if why_plain and why_ours:
            print(f"MPI communicators per user communicator: {plain / ours:.2f} "
                  f"(the user's Dup included)")


if __name__ == "__main__":
    main()
