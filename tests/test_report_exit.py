"""STRAGGLAR_REPORT=1: rank 0 prints the straggler report at exit (a real mpiexec run)."""
import pytest

import launcher
from test_examples import run_script

SCRIPT = '''
import time
import numpy as np
from mpi4py import MPI
from stragglar_mpi import Allreduce, Comm, report, stats
comm = Comm(MPI.COMM_WORLD)
for it in range({calls}):
    comm.Barrier()
    if comm.Get_rank() == {late}:
        time.sleep({delay})
    x = np.ones(1024, np.float32)
    Allreduce(comm, MPI.IN_PLACE, x, straggler="arrival", algorithm="{algorithm}")
    assert x[0] == comm.Get_size() and stats(comm)["last"]["algorithm"] == "{algorithm}"
'''


def late_rank(late, calls=8, delay=0.01, algorithm="stragglar", after=""):
    """A script where rank ``late`` comes ``delay`` s late to ``calls`` calls."""
    return SCRIPT.format(late=late, calls=calls, delay=delay, algorithm=algorithm) + after


def test_report_at_exit_on_rank_0(tmp_path):
    script = tmp_path / "late_rank_1.py"
    script.write_text(late_rank(1))
    out = run_script(3, script, env={"STRAGGLAR_REPORT": "1"})
    assert out.count("stragglar_mpi straggler report: MPI_COMM_WORLD, 3 ranks, 8 recorded calls") == 1    # every call
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["1"])
    assert int(row[5]) >= 5                      # rank 1 came last in most calls


def test_no_report_without_the_setting(tmp_path):
    script = tmp_path / "late_rank_1.py"
    script.write_text(late_rank(1))
    assert "straggler report" not in run_script(2, script)


EVERY_RANK_REPORTS = '''
text = report(comm)                      # every rank calls it; rank 0 prints it
assert "stragglar_mpi straggler report" in text
'''


@pytest.mark.skipif(not launcher.emulates_nodes(), reason="this MPI cannot emulate nodes on one machine")
def test_report_counts_hierarchical_calls_and_prints_once(tmp_path):
    """4 ranks on 2 emulated nodes, 16 hierarchical calls with rank 3 late: the report is
    printed once, and rank 3's StragglAR column counts the calls it was the straggler of."""
    script = tmp_path / "late_rank_3.py"
    script.write_text(late_rank(3, calls=16, delay=0.02, algorithm="hierarchical", after=EVERY_RANK_REPORTS))
    out = run_script(4, script, env={"MPIR_CVAR_NUM_CLIQUES": "2", "UCX_TLS": "tcp,self"})
    assert out.count("stragglar_mpi straggler report: MPI_COMM_WORLD, 4 ranks, 16 recorded calls") == 1
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["3"])
    last, ran = int(row[5]), int(row[6])
    # Every call rank 3 came last in ran hierarchical with it as the straggler, but maybe the
    # first: the record stamps the call's entry, while that call's roles come after its setup,
    # which every rank joins, so they may name another rank.
    assert last >= 12 and last - 1 <= ran <= last
    assert "the links measured at setup" in out
