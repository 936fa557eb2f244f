"""Runs on every rank; only rank 0 reports in full."""
import faulthandler
import os
import time

import pytest
from mpi4py import MPI


def pytest_configure(config):
    # A launch that nears its kill prints every thread's stack on every rank first, into
    # the folder tests/test_mpi.py names (pytest's capture owns stderr), so that a hang
    # says where each rank waits.
    folder = os.environ.get("SMPI_TEST_DUMP_TO")
    if folder:
        config._smpi_dump = open(os.path.join(folder, f"rank{MPI.COMM_WORLD.Get_rank()}.txt"), "w")
        at = float(os.environ["SMPI_TEST_DUMP_AT"])        # a time.time() of the launcher's
        faulthandler.dump_traceback_later(max(at - time.time(), 0.1), file=config._smpi_dump)
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
