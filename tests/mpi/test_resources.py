"""MPI resources stay bounded: many communicators, each used every way, all correct.

Each user communicator costs a fixed few MPI communicators (docs/ARCHITECTURE.md: "MPI resources"),
whatever the stragglers and however many calls; MPICH has about 2048 context ids per
process, and used to run out at the 121st communicator used with Iallreduce."""

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, Comm


def test_200_communicators_used_blocking_nonblocking_and_persistent(comm, world):
    n = comm.Get_size()
    if world.Get_size() != 4:
        pytest.skip("runs at 4 ranks (200 communicators take a while)")
    made, rank = [], comm.Get_rank()
    try:
        for k in range(200):
            c = Comm(comm.Dup())
            made.append(c)
            want = n * (n + 1) / 2 + n * k
            send = np.full(256, rank + 1.0 + k)
            for algorithm in ("auto", "stragglar"):
                recv = np.zeros(256)
                c.Allreduce(send, recv, MPI.SUM) if algorithm == "auto" else \
                    Allreduce(c, send, recv, algorithm=algorithm, straggler=k % n)
                assert np.all(recv == want), (k, algorithm)
            recv = np.zeros(256)
            c.Iallreduce(send, recv, MPI.SUM).Wait()
            assert np.all(recv == want), (k, "Iallreduce")
            req = c.Allreduce_init(send, recv, MPI.SUM)
            for _ in range(2):
                recv[:] = 0
                req.Start()
                req.Wait()
                assert np.all(recv == want), (k, "Allreduce_init")
            req.Free()
    finally:
        for c in made:
            c.Free()
