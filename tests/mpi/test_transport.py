"""The compiled transport is built, loaded and moves real messages between ranks."""
import os

import pytest
from mpi4py import MPI

import stragglar_mpi
from stragglar_mpi.call import allreduce as _allreduce
from stragglar_mpi.run import transport as _transport


def test_installed_package_loads_the_compiled_extensions():
    if os.environ.get("SMPI_TEST_INSTALLED"):
        assert "site-packages" in stragglar_mpi.__file__, stragglar_mpi.__file__
        assert "site-packages" in _transport._interpreter.__file__, _transport._interpreter.__file__
        assert "site-packages" in _allreduce._entry.__file__, _allreduce._entry.__file__


@pytest.mark.every_comm
def test_point_to_point_round_trip_through_the_extension(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    if n == 1:
        pytest.skip("needs a peer")
    peer = rank ^ 1
    if peer >= n:            # odd size: the last rank talks to itself
        peer = rank
    got = _transport._interpreter.ping(comm, peer, 1000, tag=7)
    assert got == bytes((peer + i) % 256 for i in range(1000))


@pytest.mark.every_comm
def test_transport_named_in_stats(comm):
    import numpy as np
    from stragglar_mpi import Allreduce, stats

    Allreduce(comm, np.ones(8), np.empty(8), algorithm="ring")
    want = None if comm.Get_size() == 1 else os.environ.get("STRAGGLAR_TRANSPORT", "cython")
    assert stats(comm)["last"]["transport"] == want
