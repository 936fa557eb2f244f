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


def pytest_sessionfinish(session, exitstatus):
    session.config._smpi_status = int(exitstatus)


# A rank whose tests failed aborts the job: the others may be blocked in a collective
# the failed test left behind, and would otherwise wait for MPIEXEC_TIMEOUT.
def pytest_unconfigure(config):
    import sys
    status = getattr(config, "_smpi_status", 1)
    if status not in (0, 5) and MPI.COMM_WORLD.Get_size() > 1:     # 5: no tests collected
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(status)
