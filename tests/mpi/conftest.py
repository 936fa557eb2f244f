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


# A rank whose tests failed aborts the job: the others may be blocked in a collective
# the failed test left behind, and would otherwise wait for MPIEXEC_TIMEOUT.
def pytest_unconfigure(config):
    import os
    import sys
    status = getattr(config, "_smpi_status", 1)
    if status not in (0, 5) and MPI.COMM_WORLD.Get_size() > 1:     # 5: no tests collected
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(status)
    if os.environ.get("SMPI_TEST_END_WITHOUT_FINALIZE") == "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
