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


# After a timeout the library's state is unusable and the documented way out is to end
# the job without going on (README: abort it).  The launch that runs the tests letting
# timeouts expire (test_mpi.py::test_mpi_timeouts) therefore ends its processes with
# their pytest status instead of MPI_Finalize, where requests the timeouts abandoned
# and a Create_group thread left blocked can crash the finalization.
def pytest_sessionfinish(session, exitstatus):
    session.config._smpi_status = int(exitstatus)


def pytest_unconfigure(config):
    import os
    import sys
    if os.environ.get("SMPI_TEST_END_WITHOUT_FINALIZE") == "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(getattr(config, "_smpi_status", 1))
