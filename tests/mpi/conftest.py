"""Runs on every rank; only rank 0 reports in full."""
import pytest
from mpi4py import MPI


def pytest_configure(config):
    if MPI.COMM_WORLD.Get_rank() != 0:
        config.option.verbose = -2
        config.option.reportchars = "fE"


@pytest.fixture
def comm():
    return MPI.COMM_WORLD


@pytest.fixture(params=["world", "dup", "split"])
def any_comm(request):
    """COMM_WORLD, a Dup of it, and a Split into two halves (formulas hold at any size)."""
    world = MPI.COMM_WORLD
    if request.param == "world":
        yield world
        return
    made = world.Dup() if request.param == "dup" else world.Split(world.Get_rank() % 2, 0)
    yield made
    made.Free()
