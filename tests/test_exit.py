"""The exit (core/lifetime.py), in real mpiexec runs: a nonblocking call from an atexit
handler that runs after the library's exit steps raises a clear error at the call (it
never hangs), and a rank whose operation can never complete fails the job after
STRAGGLAR_EXIT_TIMEOUT, naming the operations, instead of hanging it."""
import sys

import launcher

AFTER_SHUTDOWN = '''
import atexit
import numpy as np
from mpi4py import MPI

def late():      # registered before the import below: atexit runs it after the library's steps
    try:
        stragglar_mpi.Iallreduce(MPI.COMM_WORLD, np.ones(8), np.empty(8)).Wait()
    except RuntimeError as exc:
        print(f"rank {MPI.COMM_WORLD.Get_rank()}: {exc}", flush=True)

atexit.register(late)
import stragglar_mpi
stragglar_mpi.Iallreduce(MPI.COMM_WORLD, np.ones(8), np.empty(8)).Wait()
'''

STUCK = '''
import numpy as np
from mpi4py import MPI
import stragglar_mpi
if MPI.COMM_WORLD.Get_rank() == 1:      # rank 0 never makes the call
    stragglar_mpi.Iallreduce(MPI.COMM_WORLD, np.ones(8), np.empty(8), algorithm="stragglar")
print(f"rank {MPI.COMM_WORLD.Get_rank()}: done", flush=True)
'''

FREED_IN_SETUP = '''
import numpy as np
from mpi4py import MPI
from stragglar_mpi import Allreduce_init
buf = np.ones(100)
for _ in range(20):      # each Dup's setup still runs on its thread when the Frees come
    c = MPI.COMM_WORLD.Dup()
    r = Allreduce_init(c, MPI.IN_PLACE, buf)
    r.Free()
    c.Free()
print(f"rank {MPI.COMM_WORLD.Get_rank()}: done", flush=True)
'''


def test_the_exit_waits_for_setups_of_freed_communicators(tmp_path):
    """Setups still running at exit are joined before MPI_Finalize (a setup thread inside
    a blocking step during MPI_Finalize crashed in UCX's progress in about 4 of 10 runs)."""
    script = tmp_path / "freed_in_setup.py"
    script.write_text(FREED_IN_SETUP)
    for _ in range(3):
        rc, out, cmd = launcher.run(2, [sys.executable, str(script)], 60, unset=["SMPI_TEST_IN_MPIEXEC"])
        assert "rank 0: done" in out and "rank 1: done" in out, out
        assert rc == 0, f"{' '.join(cmd)} exited {rc}:\n{out}"


def test_a_nonblocking_call_after_the_exit_steps_raises_at_the_call(tmp_path):
    script = tmp_path / "after_shutdown.py"
    script.write_text(AFTER_SHUTDOWN)
    rc, out, cmd = launcher.run(2, [sys.executable, str(script)], 60, unset=["SMPI_TEST_IN_MPIEXEC"])
    for rank in (0, 1):
        assert f"rank {rank}: stragglar_mpi: a nonblocking call after the library's exit steps ran" in out, out
    assert rc == 0, f"{' '.join(cmd)} exited {rc}:\n{out}"


def test_a_stuck_operation_fails_the_job_at_exit(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    rc, out, cmd = launcher.run(2, [sys.executable, str(script)], 60, unset=["SMPI_TEST_IN_MPIEXEC"],
                                env={"STRAGGLAR_EXIT_TIMEOUT": "2"})
    assert "rank 1: done" in out and "rank 0: done" in out, out
    assert "rank 1 exits with nonblocking operations still pending after 2 s" in out, out
    assert "a nonblocking Allreduce (ticket 0)" in out, out
    assert rc != 0, f"{' '.join(cmd)} exited {rc}:\n{out}"
