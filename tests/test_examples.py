"""Run every example under ``mpiexec`` at a small size, and check the Slurm scripts parse.

The examples run as a user would run them: ``mpiexec -n N python examples/X.py``
against the installed package, with a timeout so a hang fails instead of blocking CI.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import launcher

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SLURM = sorted((ROOT / "slurm").glob("*.sbatch"))
TIMEOUT = 90


def run_example(n, script, *args, env=None):
    return run_script(n, EXAMPLES / script, *args, env=env)


def run_script(n, path, *args, env=None):
    """``mpiexec -n n python path args`` with a timeout; its output, or a failure."""
    rc, out, cmd = launcher.run(n, [sys.executable, str(path), *args], TIMEOUT, env=env,
                                unset=["SMPI_TEST_IN_MPIEXEC"])
    assert rc == 0, f"{' '.join(cmd)} exited {rc}:\n{out[-8000:]}"
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_drop_in(n):
    out = run_example(n, "drop_in.py", "--mib", "1", "--iters", "2", "--delay-ms", "5")
    assert "stragglar_mpi:" in out and "result correct" in out
    assert "stragglar_mpi.stats:" in out
    why = "native: below auto's 4 MiB threshold (STRAGGLAR_AUTO_MIN_BYTES)"
    assert f"call 0: {why}" in out and f"call 1: {why}" in out


def test_drop_in_measures_from_4_mib():
    """From 4 MiB auto decides: its first calls time the candidates, and say so."""
    out = run_example(3, "drop_in.py", "--mib", "4", "--iters", "2", "--delay-ms", "5")
    assert "result correct" in out
    assert "call 0: measuring: " in out and "of auto's first round at 4 MiB" in out


def test_drop_in_native():
    out = run_example(2, "drop_in.py", "--mib", "0.5", "--iters", "2", "--native")
    assert "mpi4py (native)" in out and "result correct" in out


@pytest.mark.parametrize("n, extra", [(4, []), (3, ["--slow-rank", "0", "--algorithm", "auto"])])
def test_train_mlp(n, extra):
    out = run_example(n, "train_mlp.py", "--steps", "4", "--hidden", "512", *extra)
    assert "median step ms" in out and "speedup of stragglar_mpi" in out
    assert "FAILED" not in out
    assert out.count("\n    3 ") == 1          # the per-step table: steps 0..3, both methods per row
    # 0.5 MiB: named, StragglAR runs; auto takes the native path, and every step says why
    why = ("native: below auto's 4 MiB threshold" if "auto" in extra
           else "stragglar: asked for by name")
    assert out.count(why) == 4 + 1, out      # a step each, and the summary's last step


def test_train_mlp_help():
    proc = subprocess.run([sys.executable, str(EXAMPLES / "train_mlp.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--steps", "--hidden", "--slow-rank", "--slow-factor", "--algorithm"):
        assert flag in proc.stdout


def test_overlap_buckets():
    out = run_example(3, "overlap_buckets.py", "--steps", "3", "--hidden", "128", "--layers", "2")
    assert "stragglar_mpi Allreduce_init" in out and "native Iallreduce" in out
    assert "same weights" in out and "FAILED" not in out
    for run in ("one Allreduce at the end", "stragglar_mpi Allreduce_init"):
        assert f"{run} ran, in its last step: stragglar: asked for by name" in out


@pytest.mark.parametrize("n", [2, 3])
def test_gpu_allreduce_under_simulator(n):
    pytest.importorskip("numba", reason="needs numba (pip install '.[cuda]'); no GPU needed")
    out = run_example(n, "gpu_allreduce.py", "--count", "256", "--iters", "2", "--delay-ms", "2",
                      env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert "result correct" in out and "algorithm stragglar" in out
    assert "last call: stragglar: asked for by name" in out


def test_slurm_scripts_exist():
    names = {p.name for p in SLURM}
    assert {"single_node_8gpu.sbatch", "multi_node.sbatch", "bench_sweep.sbatch"} <= names


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize("script", SLURM, ids=lambda p: p.name)
def test_slurm_script_parses(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    text = script.read_text()
    assert text.startswith("#!/bin/bash") and "#SBATCH" in text
    assert "export STRAGGLAR_TIMEOUT=" in text and "export STRAGGLAR_TRACE=" in text
