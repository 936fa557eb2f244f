"""More than 2**31 elements (int8, 2 ranks): the large-count MPI calls, or on MPI-3.1
their stand-ins (a derived datatype per message, pieces for Allreduce). Marked slow."""
import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["stragglar", "ring", "native"])
def test_count_above_2_31(world, algo):
    comm = world        # COMM_WORLD only: run by request (-m slow), 2 ranks of 4 GiB each
    n, rank = comm.Get_size(), comm.Get_rank()
    count = 2**31 + 7
    send = np.full(count, rank + 1, dtype=np.int8)
    send[-3:] = -1
    recv = np.zeros(count, dtype=np.int8)
    for _ in range(2 if algo == "native" else 1):   # a native repeat runs from C (the compiled entry)
        recv[:] = 0
        Allreduce(comm, send, recv, MPI.SUM, algorithm=algo)
    want = n * (n + 1) // 2
    assert recv[0] == want and recv[count // 2] == want and recv[-4] == want
    assert np.all(recv[:-3] == want)
    assert np.all(recv[-3:] == -n)
