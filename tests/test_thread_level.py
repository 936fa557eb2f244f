"""Iallreduce and Allreduce_init need MPI_THREAD_MULTIPLE: below it they raise a clear
error on every rank (and nothing hangs)."""
from test_examples import run_script

SCRIPT = '''
import mpi4py
mpi4py.rc.thread_level = "serialized"
from mpi4py import MPI
import numpy as np
from stragglar_mpi import Allreduce_init, Comm, Iallreduce
comm = Comm(MPI.COMM_WORLD)
raised = 0
for call in (Iallreduce, Allreduce_init, Comm.Iallreduce):
    try:
        call(comm, np.ones(4), np.ones(4))
    except RuntimeError as exc:
        assert "MPI_THREAD_MULTIPLE" in str(exc) and "MPI_THREAD_SERIALIZED" in str(exc), exc
        raised += 1
print(f"rank {comm.Get_rank()} raised {raised}\\n", end="", flush=True)   # one write per rank
'''


def test_below_thread_multiple_every_rank_raises(tmp_path):
    script = tmp_path / "serialized.py"
    script.write_text(SCRIPT)
    out = run_script(2, script)
    assert "rank 0 raised 3" in out and "rank 1 raised 3" in out, out
