"""Launch the DDP hook's tests (ddp/) under ``mpiexec -n N`` at 2, 3 and 4 ranks, and its
timeouts at 4 ranks in their own launch (as test_mpi.py does for mpi/).

Skipped where torch is not installed (``make test-torch`` installs the CPU wheel); under
SMPI_TEST_NO_SKIP=1 a missing torch fails instead."""
import importlib.util
import os

import pytest

from test_mpi import TAIL, run_mpi

if importlib.util.find_spec("torch") is None:
    if os.environ.get("SMPI_TEST_NO_SKIP"):
        raise ImportError("torch is not installed (SMPI_TEST_NO_SKIP=1): make test-torch installs it")
    pytest.skip("torch is not installed (make test-torch installs the CPU wheel)", allow_module_level=True)

SIZES = [int(n) for n in os.environ.get("SMPI_TEST_TORCH_SIZES", "2,3,4").split(",")]


def summary(out):
    lines = [line for line in out.splitlines() if " passed" in line or " failed" in line]
    return lines[-1] if lines else "(no summary)"


@pytest.mark.parametrize("n", SIZES)
def test_ddp_hook(n):
    rc, out = run_mpi(n, ["ddp/test_ddp.py"])
    print(f"mpiexec -n {n} ddp:", summary(out))
    assert rc == 0 and " passed" in out, out[-TAIL:]


def test_ddp_hook_timeouts():
    rc, out = run_mpi(4, ["-m", "timeouts", "ddp/test_ddp.py"])
    print("mpiexec -n 4 ddp timeouts:", summary(out))
    assert rc == 0 and " passed" in out, out[-TAIL:]
