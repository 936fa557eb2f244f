"""Jobs that go wrong, as a user meets them (real mpiexec runs, 4 ranks): a rank that never
calls, and a rank that passes another count.  The stall watchdog warns naming the missing
rank (call/watchdog.py), the timeout names it, every rank leaves its flight record
(call/flight.py) and ``python -m stragglar_mpi trace`` says what went wrong."""
import json
import subprocess
import sys

import pytest

import launcher

NEVER_CALLS = '''
import sys, time
import numpy as np
from mpi4py import MPI
from stragglar_mpi import Allreduce, StragglerTimeout
comm = MPI.COMM_WORLD
count, algorithm = int(sys.argv[1]), sys.argv[2]
x, y = np.ones(count, np.float32), np.empty(count, np.float32)
for _ in range(3):
    Allreduce(comm, x, y, algorithm=algorithm)
if comm.rank == 2:
    time.sleep(7)           # it never makes call 4
else:
    try:
        Allreduce(comm, x, y, algorithm=algorithm)
    except StragglerTimeout as exc:
        sys.stderr.write(f"rank {comm.rank}: StragglerTimeout missing={list(exc.missing)}\\n")
'''

OTHER_COUNT = '''
import sys
import numpy as np
from mpi4py import MPI
from stragglar_mpi import Allreduce
comm = MPI.COMM_WORLD
x = np.ones(1000, np.float32)
for _ in range(2):
    Allreduce(comm, MPI.IN_PLACE, x, algorithm="ring")
x = np.ones(1013 if comm.rank == 3 else 1000, np.float32)
try:        # the ring's messages have other sizes: a Mismatch, or a timeout where none came
    Allreduce(comm, MPI.IN_PLACE, x, algorithm="ring")
except Exception as exc:
    sys.stderr.write(f"rank {comm.rank}: {type(exc).__name__}\\n")
'''


def run_job(tmp_path, script, args=(), env=None):
    path = tmp_path / "job.py"
    path.write_text(script)
    rc, out, cmd = launcher.run(4, [sys.executable, str(path), *args], 120,
                                unset=["SMPI_TEST_IN_MPIEXEC", "PYTHONUNBUFFERED"], env=env)
    assert rc == 0, f"{' '.join(cmd)} exited {rc}:\n{out}"
    return out


def trace(folder):
    proc = subprocess.run([sys.executable, "-m", "stragglar_mpi", "trace", str(folder)],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("count, algorithm", [(2, "native"), (1 << 16, "stragglar")],
                         ids=["native-from-C", "stragglar"])
def test_a_rank_that_never_calls(tmp_path, count, algorithm):
    """Stall warning at 1 s, timeout at 4 s: every other rank warns once naming rank 2 and
    call 4, then raises naming rank 2; a file per rank; ``trace`` names rank 2 and call 4."""
    folder = tmp_path / "trace"
    out = run_job(tmp_path, NEVER_CALLS, (str(count), algorithm),
                  {"STRAGGLAR_STALL_WARN": "1", "STRAGGLAR_TIMEOUT": "4", "STRAGGLAR_TRACE": str(folder)})
    warnings = [line for line in out.splitlines() if "has waited" in line]
    for rank in (0, 1, 3):
        mine = [w for w in warnings if w.startswith(f"stragglar_mpi: rank {rank} has waited")]
        assert len(mine) == 1, out
        assert "call 4 on MPI_COMM_WORLD" in mine[0] and "not in it yet: rank 2 (its last call there: 3)" in mine[0]
        assert f"rank {rank}: StragglerTimeout missing=[2]" in out, out
    assert not any(w.startswith("stragglar_mpi: rank 2") for w in warnings), out
    files = sorted(p.name for p in folder.iterdir())
    assert files == [f"rank-0000{r}.jsonl" for r in range(4)], files
    head = json.loads((folder / "rank-00000.jsonl").read_text().splitlines()[0])
    assert head["reason"] == "exit" and head["version"] == 1
    rc, verdict = trace(folder)
    assert rc == 1, verdict
    assert "rank 2 never arrived at call 4" in verdict, verdict


def test_a_rank_that_passes_another_count(tmp_path):
    """``trace`` names the rank whose count differs, and the call."""
    folder = tmp_path / "trace"
    run_job(tmp_path, OTHER_COUNT, env={"STRAGGLAR_TRACE": str(folder), "STRAGGLAR_TIMEOUT": "4"})
    rc, verdict = trace(folder)
    assert rc == 1, verdict
    assert "rank 3 passed count 1013" in verdict and "call 3" in verdict, verdict


LATE_RANK = '''
import time
import numpy as np
from mpi4py import MPI
from stragglar_mpi import Allreduce
comm = MPI.COMM_WORLD
x = np.ones(1 << 18, np.float32)
for _ in range(6):
    if comm.rank == 1:
        time.sleep(0.03)
    Allreduce(comm, MPI.IN_PLACE, x, algorithm="stragglar", straggler=1)
'''


def test_the_timeline_of_a_real_run(tmp_path):
    """``timeline`` draws a real run's trace: a PNG with a row per rank."""
    pytest.importorskip("matplotlib", reason="the plot extra (pip install stragglar_mpi[plot])")
    from stragglar_mpi.bench import timeline, trace as reading
    folder, png = tmp_path / "trace", tmp_path / "timeline.png"
    run_job(tmp_path, LATE_RANK, env={"STRAGGLAR_TRACE": str(folder)})
    rc, verdict = trace(folder)
    assert rc == 0 and "all 4 ranks agree" in verdict and "rank 1" in verdict, verdict
    proc = subprocess.run([sys.executable, "-m", "stragglar_mpi", "timeline", str(folder), "-o", str(png)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = timeline.draw(reading.read(str(folder)), str(tmp_path / "again.png"))
    assert len(drawn.rows) == 4 and len(drawn.seqs) == 6, drawn
