"""After a StragglerTimeout the job exits cleanly with the program's exit code (a real
mpiexec run): no library thread is left inside MPI, so MPI_Finalize does not crash."""
import sys

import launcher

SCRIPT = '''
import sys, time
import numpy as np
from mpi4py import MPI
from stragglar_mpi import Allreduce, StragglerTimeout
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
Allreduce(comm, np.ones(64), np.empty(64), algorithm="stragglar", straggler=3)    # warm-up
comm.Barrier()
if rank == 1:
    time.sleep(8)
try:
    Allreduce(comm, np.ones(64), np.empty(64), algorithm="stragglar", straggler=2)
except StragglerTimeout as exc:
    print(f"rank {rank}: StragglerTimeout: missing={list(exc.missing)}", flush=True)
    sys.exit(3)
print(f"rank {rank}: no error", flush=True)
'''


def test_a_timeout_exits_with_the_programs_code(tmp_path):
    """4 ranks, STRAGGLAR_TIMEOUT=2, a warm-up with straggler=3, then rank 1 8 s late to
    a call with straggler=2: every rank's error reaches the log, nobody crashes, and
    mpiexec returns the program's exit code."""
    script = tmp_path / "late_rank_1.py"
    script.write_text(SCRIPT)
    rc, out, cmd = launcher.run(4, [sys.executable, str(script)], 90, unset=["SMPI_TEST_IN_MPIEXEC"],
                                env={"STRAGGLAR_TIMEOUT": "2"})
    for rank in (0, 2, 3):
        assert f"rank {rank}: StragglerTimeout: missing=[1]" in out, out
    assert "rank 1: StragglerTimeout" in out, out
    for crash in ("Segmentation", "BAD TERMINATION", "corrupted", "Traceback"):
        assert crash not in out, out
    assert rc == 3, f"{' '.join(cmd)} exited {rc}:\n{out}"
