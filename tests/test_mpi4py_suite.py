"""mpi4py's own Allreduce (test_cco_buf), Iallreduce (test_cco_nb_buf), Allreduce_init
(test_cco_pr_buf), Op (test_op) and zero-size message (test_msgzero) tests, run with ``stragglar_mpi.Comm`` in place of mpi4py's communicators.

The tests are those of the installed mpi4py's source distribution, downloaded once
from PyPI into a cache next to the environment (``<sys.prefix>/smpi-cache``) and
run unchanged by tests/mpi4py_suite/run.py.  Skipped, with the reason, only when
the package registry cannot be reached (a failure instead under SMPI_TEST_NO_SKIP=1, as
in CI).  SMPI_TEST_MPI4PY_SIZES (comma-separated) sets the world sizes; default: those of
the MPI matrix (SMPI_TEST_SIZES) up to 4 ranks (1: the native path of a single rank; 2, 3
and 4: even and odd.  Their tests check what mpi4py's API promises, not our schedules,
which tests/mpi runs at 5 and 8 too).
"""
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import mpi4py
import pytest

import launcher
from test_mpi import SIZES
from test_examples import run_script

HERE = Path(__file__).resolve().parent
CACHE = Path(sys.prefix) / "smpi-cache"
MPI4PY_SIZES = [int(n) for n in os.environ["SMPI_TEST_MPI4PY_SIZES"].split(",")] \
    if os.environ.get("SMPI_TEST_MPI4PY_SIZES") else [n for n in SIZES if n <= 4]


@pytest.fixture(scope="module")
def mpi4py_tests():
    version = mpi4py.__version__
    unpacked = CACHE / f"mpi4py-{version}" / "test"
    if not unpacked.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        # pip reads the sdist's metadata: with this venv's setuptools when it has one
        isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary=:all:",
                               "--no-deps", *isolation, f"mpi4py=={version}", "-d", str(CACHE)],
                              capture_output=True, text=True, timeout=300)
        sdist = CACHE / f"mpi4py-{version}.tar.gz"
        if proc.returncode != 0 or not sdist.exists():
            (pytest.fail if os.environ.get("SMPI_TEST_NO_SKIP") else pytest.skip)(f"mpi4py {version} source distribution not downloadable from the package "
                        f"registry: {proc.stderr.strip()[-300:]}")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"mpi4py-{version}/test/")]
            try:
                tar.extractall(CACHE, members=members, filter="data")
            except TypeError:      # Python without extraction filters (before 3.11.4)
                tar.extractall(CACHE, members=members)
    return unpacked


@pytest.mark.parametrize("n", MPI4PY_SIZES)
def test_mpi4py_suite_with_comm(mpi4py_tests, n):
    assert launcher.mpiexec()
    out = run_script(n, HERE / "mpi4py_suite" / "run.py", str(mpi4py_tests))
    summary = re.search(rf"with stragglar_mpi.Comm on {n} ranks: (\d+) tests, (\d+) failed", out)
    assert summary, out[-4000:]
    assert int(summary[1]) >= 20 and summary[2] == "0", out[-4000:]
    nonblocking = re.search(r"nonblocking: (\d+) tests, (\d+) Iallreduce", out)
    assert nonblocking and int(nonblocking[1]) >= 8 and int(nonblocking[2]) > 0, out[-4000:]
