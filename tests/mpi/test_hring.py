"""algorithm="hring" (the hierarchical ring) on emulated nodes (tests/test_mpi.py launches
this file with MPIR_CVAR_NUM_CLIQUES=K: rank r on node r mod K, 3+3+2 at K=3 and n=8), in
the cyclic layout the cliques give and in the block layout a renumbering Split makes.
On one node, or with a rank per node, it runs the flat ring and says so."""
import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats
from stragglar_mpi.call.allreduce import state_of
from helpers import CASES, assert_same_on_every_rank, contribution, expected, mpi_maps


def _ran(comm):
    return stats(comm)["last"].get("algorithm")


def _expected_name(comm):
    topo = state_of(comm).topology
    return "hring" if topo is not None and not topo.flat else "ring"


def test_in_place_and_not_every_count(laid_out):
    comm = laid_out
    n, rank = comm.Get_size(), comm.Get_rank()
    for in_place in (False, True):
        for count in (0, 1, n - 1, n + 1, 3 * n + 2, 10007):
            send = contribution(rank, n, count, "d", "SUM")
            if in_place:
                recv = send.copy()
                Allreduce(comm, MPI.IN_PLACE, recv, MPI.SUM, algorithm="hring")
            else:
                recv = np.full(count, -1.0)
                Allreduce(comm, send, recv, MPI.SUM, algorithm="hring")
            np.testing.assert_array_equal(recv, expected(n, count, "d", "SUM"),
                                          err_msg=f"count {count}, in place {in_place}")
            if n > 1 and count > 0:
                assert _ran(comm) == _expected_name(comm)


@pytest.mark.parametrize("code,opname", CASES)
def test_every_dtype_and_op(laid_out, code, opname):
    comm = laid_out
    n, rank = comm.Get_size(), comm.Get_rank()
    if not mpi_maps(code):     # test_allreduce checks the error mpi4py raises for it
        return
    for count, in_place in ((2 * n + 3, False), (n + 1, True), (5, False)):
        send = contribution(rank, n, count, code, opname)
        recv = send.copy() if in_place else np.zeros_like(send)
        Allreduce(comm, MPI.IN_PLACE if in_place else send, recv, getattr(MPI, opname),
                  algorithm="hring")
        np.testing.assert_array_equal(recv, expected(n, count, code, opname), err_msg=f"{in_place}")


@pytest.mark.parametrize("opname", ["SUM", "MAX", "PROD"])
def test_random_floats_bitwise_identical_on_every_rank(laid_out, opname):
    comm = laid_out
    n, rank = comm.Get_size(), comm.Get_rank()
    rng = np.random.default_rng(7 + rank)
    for count in (1, 5 * n + 1, 4099):
        send = rng.standard_normal(count)
        if opname == "MAX":
            send[::4] = np.nan
        recv = np.empty_like(send)
        Allreduce(comm, send, recv, getattr(MPI, opname), algorithm="hring")
        assert_same_on_every_rank(comm, recv, "the result")


def test_forced_by_the_environment(laid_out, setenv):
    setenv(STRAGGLAR_ALGO="hring")
    comm = laid_out
    n, rank = comm.Get_size(), comm.Get_rank()
    send = contribution(rank, n, 4 * n + 1, "i", "SUM")
    recv = np.zeros_like(send)
    Allreduce(comm, send, recv, MPI.SUM, algorithm="native")
    np.testing.assert_array_equal(recv, expected(n, send.size, "i", "SUM"))
    if n > 1:
        assert _ran(comm) == _expected_name(comm)


def test_device_and_host_ranks_in_one_call(laid_out):
    # Even ranks pass device arrays (Numba's simulator here), odd ranks host arrays.
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("no CUDA device and no simulator")
    comm = laid_out
    n, rank = comm.Get_size(), comm.Get_rank()
    send = contribution(rank, n, 2 * n + 5, "d", "SUM")
    if rank % 2 == 0:
        out = cuda.to_device(np.zeros_like(send))
        Allreduce(comm, cuda.to_device(send), out, MPI.SUM, algorithm="hring")
        got = out.copy_to_host()
    else:
        got = np.zeros_like(send)
        Allreduce(comm, send, got, MPI.SUM, algorithm="hring")
    np.testing.assert_array_equal(got, expected(n, send.size, "d", "SUM"))
    assert_same_on_every_rank(comm, _ran(comm), "the algorithm")
