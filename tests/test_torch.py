"""Launch the DDP hook's tests (ddp/) under ``mpiexec -n N`` at 2, 3 and 4 ranks, and its
timeouts at 4 ranks in their own launch (as test_mpi.py does for mpi/).

Skipped where torch is not installed (``make test-torch`` installs the CPU wheel); under
SMPI_TEST_NO_SKIP=1 a missing torch fails instead."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

import launcher
from test_mpi import TAIL, run_mpi

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

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


def test_example_ddp_straggler_bench():
    """examples/ddp_straggler.py --bench, small: every hook, with and without a slow rank,
    the same weights as DDP's default hook."""
    argv = [sys.executable, str(EXAMPLES / "ddp_straggler.py"), "--bench", "--steps", "2", "--warmup", "2",
            "--width", "64", "--layers", "2", "--bucket-mb", "0.01", "--delay", "0.02"]
    rc, out, cmd = launcher.run(4, argv, 300, unset=["SMPI_TEST_IN_MPIEXEC"])
    assert rc == 0, f"{' '.join(cmd)} exited {rc}:\n{out[-TAIL:]}"
    assert "same weights as the default hook" in out and "FAILED" not in out, out
    assert out.count("vs default") == 6, out
    assert "stragglar: asked for by name" in out and "native: asked for by name" in out, out
