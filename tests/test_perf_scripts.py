"""The performance scripts in tests/perf still run (tiny sizes; their figures are not checked here)."""
import os
import subprocess
import sys

import pytest

from test_examples import ROOT, TIMEOUT, mpiexec

PERF = ROOT / "tests" / "perf"


def run_script(n, script, *args):
    env = dict(os.environ, MPIR_CVAR_CH4_PROGRESS_THROTTLE="1", MPIEXEC_TIMEOUT=str(TIMEOUT))
    env.pop("SMPI_TEST_IN_MPIEXEC", None)
    cmd = [mpiexec(), "-n", str(n), sys.executable, str(PERF / script), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT + 30)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-8000:]}"
    return out


@pytest.mark.parametrize("script,args,expect", [
    ("bench_auto.py", ["--size", "64K", "--iters", "3", "--delay-ms", "1"], "native/native2"),
    ("bench_transport.py", ["--iters", "1"], "16777216"),
    ("bench_validate.py", ["--size", "64K", "--iters", "3"], "median call"),
    ("soak.py", ["--calls", "40", "--warmup", "10", "--max-bytes", "64K"], "errors 0"),
])
def test_perf_script_runs(script, args, expect):
    assert expect in run_script(2, script, *args)
