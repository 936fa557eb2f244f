"""STRAGGLAR_REPORT=1: rank 0 prints the straggler report at exit (a real mpiexec run)."""
from test_examples import run_script

SCRIPT = '''
import time
import numpy as np
from mpi4py import MPI
from stragglar_mpi import Allreduce, Comm
comm = Comm(MPI.COMM_WORLD)
for it in range(8):
    comm.Barrier()
    if comm.Get_rank() == 1:
        time.sleep(0.01)
    x = np.ones(1024, np.float32)
    Allreduce(comm, MPI.IN_PLACE, x, straggler="arrival", algorithm="stragglar")
    assert x[0] == comm.Get_size()
'''


def test_report_at_exit_on_rank_0(tmp_path):
    script = tmp_path / "late_rank_1.py"
    script.write_text(SCRIPT)
    out = run_script(3, script, env={"STRAGGLAR_REPORT": "1"})
    assert out.count("stragglar_mpi straggler report: MPI_COMM_WORLD, 3 ranks, 7 recorded calls") == 1
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["1"])
    assert int(row[1]) >= 5                      # rank 1 came last in most calls


def test_no_report_without_the_setting(tmp_path):
    script = tmp_path / "late_rank_1.py"
    script.write_text(SCRIPT)
    assert "straggler report" not in run_script(2, script)
