"""Runs on every rank; only rank 0 reports in full."""
import faulthandler
import os
import time

import pytest
from mpi4py import MPI


def pytest_configure(config):
    config.addinivalue_line("markers", "every_comm: run a one-case body on every kind of communicator")
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


# --- the communicator a test body runs on -----------------------------------------------
# A body that makes sense on any communicator takes ``comm``: COMM_WORLD, a Dup or a Split
# of it, and COMM_SELF too in the 1-rank launch, in rotation, at no extra cost.  A case's
# kind is KINDS[(its parameter indices summed + the world size) % len(KINDS)]: the cases
# of a parametrized body meet every kind in each launch (each value of a parameter meets
# each kind where the other parameters have 3 values or more), and a body of one case
# meets each kind over the suite's launches (3 ranks: COMM_WORLD, 1 and 4: the Dup, 2, 5
# and 8: the Split).  A cheap body of one case runs on every kind in each launch
# (``@pytest.mark.every_comm``).  ``world`` is for bodies about COMM_WORLD itself, timeouts
# and sizes the suite picks by the world size.  The Dup and the Split are made once per
# launch: the library's state on them lives on from body to body, as on COMM_WORLD.
WORLD = MPI.COMM_WORLD
KINDS = ("world", "dup", "split") + (("self",) if WORLD.Get_size() == 1 else ())
_made = {}


def split_of(world):
    """Two pieces the formulas hold on: the ranks r with r % 3 == 2 and the others (3 ranks:
    2+1, 4: 3+1, 5: 4+1, 8: 6+2; 1 or 2 ranks: one piece), each numbered in the reverse
    of their order in COMM_WORLD."""
    rank = world.Get_rank()
    return world.Split(int(rank % 3 == 2), world.Get_size() - rank)


def communicator(kind):
    if kind == "world":
        return WORLD
    if kind == "self":
        return MPI.COMM_SELF
    if kind not in _made:           # the first body that asks, the same one on every rank
        _made[kind] = WORLD.Dup() if kind == "dup" else split_of(WORLD)
    return _made[kind]


def kind_of(item):
    if "comm" not in item.fixturenames:
        return None
    if item.get_closest_marker("timeouts"):     # timed at 4 ranks, in a launch of their own:
        return "world"                          # on COMM_WORLD, as a job meets them
    spec = getattr(item, "callspec", None)
    if spec is not None and "comm" in spec.params:        # @pytest.mark.every_comm
        return spec.params["comm"]
    case = sum(spec.indices.values()) if spec is not None else 0
    return KINDS[(case + WORLD.Get_size()) % len(KINDS)]


def pytest_generate_tests(metafunc):
    if "comm" in metafunc.fixturenames and metafunc.definition.get_closest_marker("every_comm"):
        metafunc.parametrize("comm", KINDS, indirect=True)


@pytest.fixture
def comm(request):
    kind = kind_of(request.node)
    # said in a failure's report: which communicator the case ran on
    request.node.add_report_section("setup", "communicator", kind)
    return communicator(kind)


@pytest.fixture
def world():
    return WORLD


@pytest.fixture(params=KINDS)
def any_comm(request):
    """Every kind, as an axis of its own."""
    return communicator(request.param)


@pytest.fixture(scope="module", params=["cyclic", "block"])
def laid_out(request):
    """COMM_WORLD renumbered so that its nodes (emulated by tests/test_mpi.py) are cyclic
    or blocks of consecutive ranks (Slurm's block layout); one per file and layout."""
    from stragglar_mpi.bench._sweep import relayout
    comm = relayout(WORLD, request.param)
    yield comm
    comm.Free()


def pytest_sessionfinish(session, exitstatus):
    session.config._smpi_status = int(exitstatus)
    if int(exitstatus) in (0, 5):   # after a failure the job aborts; Free could wait for a rank
        for made in _made.values():
            made.Free()
        _made.clear()


# A rank whose tests failed aborts the job: the others may be blocked in a collective
# the failed test left behind, and would otherwise wait for MPIEXEC_TIMEOUT.
def pytest_unconfigure(config):
    import sys
    status = getattr(config, "_smpi_status", 1)
    if status not in (0, 5) and MPI.COMM_WORLD.Get_size() > 1:     # 5: no tests collected
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(status)
