"""Bad settings raise on every rank, at configure() and at every call after it, naming the variable."""
import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, Comm
from helpers import assert_same_on_every_rank

BAD = [("STRAGGLAR_TIMEOUT", "nan"), ("STRAGGLAR_TIMEOUT", "inf"), ("STRAGGLAR_TIMEOUT", "-2"),
       ("STRAGGLAR_MODEL", "1e-5,0,1"), ("STRAGGLAR_VALIDATE", "2"),
       ("STRAGGLAR_AUTO_MIN_BYTES", "-1"), ("STRAGGLAR_CUDA_PIECE_BYTES", "0"),
       ("STRAGGLAR_REPORT", "yes"), ("STRAGGLAR_ALGO", "fastest"), ("STRAGGLAR_TIMEOT", "3")]


@pytest.mark.parametrize("name,value", BAD)
def test_a_bad_setting_raises_on_every_rank(comm, setenv, name, value):
    with pytest.raises(ValueError, match=name) as info:
        setenv(**{name: value})
    assert_same_on_every_rank(comm, str(info.value), "the message")
    for call in (lambda: Allreduce(comm, np.ones(4), np.zeros(4)),
                 lambda: Comm(comm).Allreduce(MPI.IN_PLACE, np.ones(4))):
        with pytest.raises(ValueError, match=name):
            call()
    comm.Barrier()
