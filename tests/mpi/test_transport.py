"""The compiled interpreter is built, loaded and runs a plan's real messages between ranks."""
import os

import numpy as np
import pytest
from mpi4py import MPI

import stragglar_mpi
from stragglar_mpi.call import _entry
from stragglar_mpi.run import _interpreter
from stragglar_mpi.run.plan import COLUMNS, IN, OUT, RECV, REDUCE, SCRATCH, SEND, Plan


def test_installed_package_loads_the_compiled_extensions():
    if os.environ.get("SMPI_TEST_INSTALLED"):
        assert "site-packages" in stragglar_mpi.__file__, stragglar_mpi.__file__
        assert "site-packages" in _interpreter.__file__, _interpreter.__file__
        assert "site-packages" in _entry.__file__, _entry.__file__


class Rounds:
    """A plan's round hook that notes what it is told."""

    def __init__(self):
        self.told = []

    def begin(self, rnd):
        self.told.append(("begin", rnd))

    def end(self, rnd):
        self.told.append(("end", rnd))


@pytest.mark.every_comm
def test_a_plan_of_two_rounds_with_a_peer_through_the_machine(comm):
    """Round 0 swaps the buffers with a peer and adds them, round 1 swaps the sums: real
    messages through ``_interpreter.machine`` (the last rank of an odd size talks to itself),
    the round hook told when each round starts and ends."""
    n, rank = comm.Get_size(), comm.Get_rank()
    peer = rank ^ 1 if rank ^ 1 < n else rank
    k = 1000
    mine, out, scratch = np.arange(k) + 1000.0 * rank, np.zeros(k), np.zeros(k)
    rows = [(RECV, 0, peer, OUT, 0, k, 0, 0), (SEND, 0, peer, IN, 0, k, 0, 0),
            (REDUCE, 0, peer, IN, 0, k, OUT, 0),
            (RECV, 1, peer, SCRATCH, 0, k, 0, 0), (SEND, 1, peer, OUT, 0, k, 0, 0)]
    plan = Plan(np.array(rows, dtype=np.int64), scratch.nbytes, 2)
    addresses = tuple(a.ctypes.data for a in (mine, out, scratch))
    c, rounds = comm.Dup(), Rounds()
    try:
        machine = _interpreter.machine(plan, addresses, c, MPI.DOUBLE, MPI.SUM, rounds=rounds, tag0=7)
        first = machine.run()
    finally:
        c.Free()
    want = mine + (np.arange(k) + 1000.0 * peer)
    assert np.array_equal(out, want) and np.array_equal(scratch, want)
    assert rounds.told == [("begin", 0), ("end", 0), ("begin", 1), ("end", 1)]
    assert isinstance(first, float)


def test_an_empty_plan_has_no_machine(comm):
    plan = Plan(np.zeros((0, len(COLUMNS)), dtype=np.int64), 0, 0)
    assert _interpreter.machine(plan, (0, 0, 0), comm, MPI.DOUBLE, MPI.SUM) is None
