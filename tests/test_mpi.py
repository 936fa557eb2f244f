"""Launch the tests in mpi/ under ``mpiexec -n N`` for several world sizes and both transports.

A hung run dies after MPIEXEC_TIMEOUT seconds (and the subprocess timeout behind
it), so a deadlock fails the test instead of eating the CI budget.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SIZES = [1, 2, 3, 4, 5, 8]
TIMEOUT = int(os.environ.get("SMPI_TEST_TIMEOUT", "300"))


def mpiexec():
    local = Path(sys.executable).parent / "mpiexec"
    return os.environ.get("SMPI_TEST_MPIEXEC") or (str(local) if local.exists() else shutil.which("mpiexec"))


def run_mpi(n, args, transport="cython", timeout=TIMEOUT):
    env = dict(os.environ, SMPI_TEST_IN_MPIEXEC="1", STRAGGLAR_TRANSPORT=transport,
               MPIEXEC_TIMEOUT=str(timeout), MPIR_CVAR_CH4_PROGRESS_THROTTLE="1",
               PYTHONUNBUFFERED="1", NUMBA_ENABLE_CUDASIM="1", SMPI_TEST_INSTALLED="1")
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-x", *args]
    proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout + 60)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("transport", ["cython", "python"])
@pytest.mark.parametrize("n", SIZES)
def test_mpi_suite(n, transport):
    rc, out = run_mpi(n, ["-m", "not slow and not timeouts", "mpi"], transport)
    summary = [line for line in out.splitlines() if " passed" in line or " failed" in line]
    print(f"mpiexec -n {n} ({transport}):", summary[-1] if summary else "(no summary)")
    assert rc == 0, out[-20000:]


@pytest.mark.parametrize("transport", ["cython", "python"])
def test_mpi_timeouts(transport):
    """The tests that let a timeout expire, in their own processes at 4 ranks: after a
    timeout a job should abort, so they do not share a process with the rest."""
    rc, out = run_mpi(4, ["-m", "timeouts", "mpi/test_reliability.py"], transport)
    summary = [line for line in out.splitlines() if " passed" in line or " failed" in line]
    print(f"mpiexec -n 4 timeouts ({transport}):", summary[-1] if summary else "(no summary)")
    assert rc == 0, out[-20000:]


@pytest.mark.slow
def test_count_above_2_31_at_two_ranks():
    rc, out = run_mpi(2, ["-m", "slow", "mpi/test_huge.py"], timeout=900)
    assert rc == 0, out[-20000:]


def test_info_command_reports_mpi_and_the_compiled_transport():
    proc = subprocess.run([sys.executable, "-m", "stragglar_mpi", "info"], cwd=HERE,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "MPICH" in proc.stdout or "Open MPI" in proc.stdout
    assert "compiled transport   loaded" in proc.stdout
    assert "compiled repeat      loaded" in proc.stdout
    version = subprocess.run([sys.executable, "-m", "stragglar_mpi", "--version"], cwd=HERE,
                             capture_output=True, text=True, timeout=120)
    assert version.stdout.startswith("stragglar_mpi ")
