"""Launch the tests in mpi/ under ``mpiexec -n N`` for several world sizes.

A hung run is killed after SMPI_TEST_TIMEOUT seconds (by the launcher, see
launcher.py, and the subprocess timeout behind it), so a deadlock fails the test
instead of eating the CI budget.  SMPI_TEST_SIZES (comma-separated) narrows the world
sizes, SMPI_TEST_FILES (space-separated, under tests/) the files of test_mpi_suite
(`make test-mpi FILE=mpi/test_allreduce.py NP=4`), and SMPI_TEST_RANDOM_SIZES the sizes
of the random calls (tests/perf/soak.py).
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import launcher

HERE = Path(__file__).resolve().parent
SIZES = [int(n) for n in os.environ.get("SMPI_TEST_SIZES", "1,2,3,4,5,8").split(",")]
TIMEOUT = int(os.environ.get("SMPI_TEST_TIMEOUT", "300"))
FILES = os.environ.get("SMPI_TEST_FILES", "mpi").split()
RANDOM_SIZES = [int(n) for n in os.environ.get("SMPI_TEST_RANDOM_SIZES", "3,5").split(",")]
TAIL = 60000     # characters of a failed launch's output shown (room for every rank's stacks)


def run_mpi(n, args, timeout=TIMEOUT, extra_env=None, ranks=None):
    """``ranks``: MPMD launch, one ``(count, [env assignments])`` per block of ranks."""
    if "-m" not in args:    # timeouts run in their own launch (test_mpi_timeouts)
        args = ["-m", "not slow and not timeouts", *args]
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *args]
    with tempfile.TemporaryDirectory(prefix="smpi-stacks-") as stacks:
        env = dict(SMPI_TEST_IN_MPIEXEC="1", NUMBA_ENABLE_CUDASIM="1", SMPI_TEST_INSTALLED="1", SMPI_TEST_DUMP_TO=stacks,
                   SMPI_TEST_DUMP_AT=str(time.time() + max(timeout - 45, timeout * 0.8)), **(extra_env or {}))
        rc, out, _ = launcher.run(n, argv, timeout, cwd=HERE, env=env, ranks=ranks)
        if rc != 0:
            out += hang_stacks(Path(stacks))
    return rc, out


def hang_stacks(folder):
    """Every rank's threads, as each printed them a little before the launch's kill
    (tests/mpi/conftest.py); nothing if the launch ended before that."""
    dumps = [(p.stem, p.read_text()) for p in sorted(folder.glob("rank*.txt"))]
    return "".join(f"\n--- {rank}: its threads' stacks before the kill ---\n{text}"
                   for rank, text in dumps if text.strip())


@pytest.mark.parametrize("n", SIZES)
def test_mpi_suite(n):
    rc, out = run_mpi(n, ["-m", "not slow and not timeouts", *FILES])
    summary = [line for line in out.splitlines() if " passed" in line or " failed" in line]
    print(f"mpiexec -n {n}:", summary[-1] if summary else "(no summary)")
    assert rc == 0, out[-TAIL:]


TIMEOUT_FILES = ["mpi/test_reliability.py", "mpi/test_nonblocking.py", "mpi/test_late_past_timeout.py"]


def test_mpi_timeouts():
    """The tests that let a timeout expire, in their own processes at 4 ranks: after a
    timeout a job should abort, so they do not share a process with the rest."""
    rc, out = run_mpi(4, ["-m", "timeouts", *TIMEOUT_FILES])
    summary = [line for line in out.splitlines() if " passed" in line or " failed" in line]
    print("mpiexec -n 4 timeouts:", summary[-1] if summary else "(no summary)")
    assert rc == 0, out[-TAIL:]


@pytest.mark.parametrize("n", RANDOM_SIZES)
def test_random_calls(n):
    """tests/perf/soak.py, short: random sizes, datatypes, ops, late ranks, policies and
    algorithms, each result compared with the native Allreduce; nothing may grow."""
    argv = [sys.executable, str(HERE / "perf" / "soak.py"), "--calls", "300", "--warmup", "100",
            "--max-bytes", "256K"]
    rc, out, _ = launcher.run(n, argv, TIMEOUT, cwd=HERE)
    print(f"mpiexec -n {n} random calls:", out.strip().splitlines()[-1:] or "(no output)")
    assert rc == 0 and "errors 0" in out, out[-TAIL:]


# Emulated nodes are MPICH's cliques; Open MPI has no such setting (docs/BUILDING.md, "Emulated nodes").
NODES = pytest.mark.skipif(not launcher.emulates_nodes(), reason="this MPI cannot emulate nodes on one machine")


# Emulated nodes: the mpich wheel puts rank r on node r mod K (MPIR_CVAR_NUM_CLIQUES=K);
# traffic between them goes over TCP loopback.  (n, K): 2x2, 2x4, 4x2 and 3,3,2.
CLIQUE_RUNS = [(4, 2), (8, 2), (8, 4), (8, 3)]


def _cliques(k):
    return {"MPIR_CVAR_NUM_CLIQUES": str(k), "UCX_TLS": "tcp,self"}


@NODES
@pytest.mark.parametrize("n,k", CLIQUE_RUNS)
def test_hierarchical_on_emulated_nodes(n, k):
    rc, out = run_mpi(n, ["mpi/test_hierarchical.py", "mpi/test_hring.py"], extra_env=_cliques(k))
    assert rc == 0, out[-TAIL:]


@NODES
def test_the_rest_on_emulated_nodes():
    """Everything else keeps working when the communicator spans nodes (2 nodes of 2)."""
    files = ["mpi/test_allreduce.py", "mpi/test_bind.py", "mpi/test_policy.py", "mpi/test_reliability.py"]
    rc, out = run_mpi(4, files, extra_env=_cliques(2))
    assert rc == 0, out[-TAIL:]


@NODES
def test_timeouts_on_emulated_nodes():
    """A missing rank is named and every rank raises when the ranks span nodes (2 of 2)."""
    rc, out = run_mpi(4, ["-m", "timeouts", "mpi/test_reliability.py"], extra_env=_cliques(2))
    assert rc == 0, out[-TAIL:]


@pytest.mark.slow
def test_count_above_2_31_at_two_ranks():
    rc, out = run_mpi(2, ["-m", "slow", "mpi/test_huge.py"], timeout=900)
    assert rc == 0, out[-TAIL:]


def test_info_command_reports_mpi_and_the_compiled_transport():
    proc = subprocess.run([sys.executable, "-m", "stragglar_mpi", "info"], cwd=HERE,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert any(name in proc.stdout for name in ("MPICH", "Open MPI", "Intel(R) MPI")), proc.stdout
    assert "compiled transport   loaded" in proc.stdout
    assert "compiled entry       loaded" in proc.stdout
    version = subprocess.run([sys.executable, "-m", "stragglar_mpi", "--version"], cwd=HERE,
                             capture_output=True, text=True, timeout=120)
    assert version.stdout.startswith("stragglar_mpi ")


# Emulated nodes (MPICH cliques; traffic between them over TCP, no asynchronous progress):
# cyclic node of rank r = r mod K; the tests also renumber into the block layout.
CLIQUES = {"2x2": (4, {"MPIR_CVAR_ODD_EVEN_CLIQUES": "1"}),
           "3 nodes of 3,3,2": (8, {"MPIR_CVAR_NUM_CLIQUES": "3"})}
FAKETIME = [p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                        "/usr/lib/faketime/libfaketimeMT.so.1") if Path(p).exists()]


@NODES
@pytest.mark.parametrize("layout", CLIQUES)
def test_arrival_on_emulated_nodes(layout):
    n, env = CLIQUES[layout]
    rc, out = run_mpi(n, ["mpi/test_arrival.py", "mpi/test_policy.py"],
                      extra_env=dict(env, UCX_TLS="tcp,self"))
    assert rc == 0, out[-TAIL:]


@NODES
def test_arrival_by_groups_at_4_ranks_on_emulated_nodes():
    """The groups' table (by default from STRAGGLAR_ARRIVAL_GROUPS=16 ranks) forced at 4
    ranks on 2 emulated nodes of 2: roles, auto and clocks, then the timeouts whose
    missing ranks the arrival table names.  Below 16 ranks the other runs here take
    notices to every rank; tests/test_arrival_scale.py runs groups at 16 by default."""
    env = {"MPIR_CVAR_ODD_EVEN_CLIQUES": "1", "UCX_TLS": "tcp,self", "STRAGGLAR_ARRIVAL_GROUPS": "2"}
    rc, out = run_mpi(4, ["mpi/test_arrival.py", "mpi/test_policy.py"], extra_env=env)
    assert rc == 0, out[-TAIL:]
    named = "missing_rank_at_each_step or two_missing_ranks or missing_rank_at_a_new_straggler"
    rc, out = run_mpi(4, ["-m", "timeouts", "-k", named, "mpi/test_reliability.py"], extra_env=env)
    assert rc == 0, out[-TAIL:]


@pytest.mark.skipif(not FAKETIME, reason="libfaketime is not installed (apt-get install faketime)")
@NODES
def test_arrival_with_clocks_shifted_by_seconds():
    """2 emulated nodes of 2; rank 1 runs 3 s ahead, rank 2 2 s behind (libfaketime)."""
    def shifted(seconds):
        return [f"LD_PRELOAD={FAKETIME[0]}", f"FAKETIME={seconds:+d}s", f"SMPI_TEST_CLOCK_SHIFT={seconds}"]
    ranks = [(1, []), (1, shifted(3)), (1, shifted(-2)), (1, [])]
    rc, out = run_mpi(4, ["mpi/test_arrival.py"], extra_env={"MPIR_CVAR_ODD_EVEN_CLIQUES": "1",
                                                              "UCX_TLS": "tcp,self"}, ranks=ranks)
    assert rc == 0, out[-TAIL:]
