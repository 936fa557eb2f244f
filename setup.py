"""Build the Cython transport against the MPI that mpi4py uses (and the schedule's
compiled greedy round and round checker, which need no MPI).

The compiler wrapper is $MPICC when set (a cluster's own MPI), otherwise the
`mpicc` of the `mpich` wheel from PyPI (the embedded default).  We only ask the
wrapper for its flags and compile with the regular compiler, so the same code
works with MPICH (`-show`) and Open MPI (`--showme`).  No rpath is kept: at run
time libmpi is the one mpi4py has already loaded (we always import mpi4py first).
MPI-4 calls are used only where mpi.h says MPI_VERSION >= 4 (cython_src/run/mpi_compat.h),
so the same sources build against MPI-3.1 libraries (Open MPI 4.1 and 5, ...).

The compiled sources live in cython_src/, a folder per room: cython_src/<room>/<name>.pyx
builds the module stragglar_mpi.<room>.<name>, its .pxi parts beside it.
"""
import hashlib
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup


def find_mpicc():
    # $MPICC, else the venv's own (the mpich wheel), and only then the first on PATH:
    # a system MPI's /usr/bin/mpicc must not leak into a build for the embedded mpich.
    local = os.path.join(os.path.dirname(sys.executable), "mpicc")
    cand = os.environ.get("MPICC") or (local if os.path.exists(local) else shutil.which("mpicc"))
    if not cand:
        sys.exit("stragglar_mpi: no MPI compiler wrapper found; set MPICC or `pip install mpich`")
    return cand


def mpi_flags(mpicc):
    for opt in ("-show", "--showme"):
        try:
            out = subprocess.run(shlex.split(mpicc) + [opt], capture_output=True, text=True, check=True)
        except (OSError, subprocess.CalledProcessError):
            continue
        args = shlex.split(out.stdout)[1:]
        return {
            "include_dirs": [a[2:] for a in args if a.startswith("-I")],
            "library_dirs": [a[2:] for a in args if a.startswith("-L")],
            "libraries": [a[2:] for a in args if a.startswith("-l")],
            "extra_compile_args": [a for a in args if a.startswith("-D")],
        }
    sys.exit(f"stragglar_mpi: cannot read flags from {mpicc} (-show / --showme)")


def extensions(flags):
    """cython_src/<room>/<name>.pyx -> stragglar_mpi.<room>.<name>."""
    import mpi4py
    from Cython.Build import cythonize

    flags["include_dirs"][:0] = [mpi4py.get_include(), "cython_src/run"]

    def extension(room, name, **kw):
        folder = os.path.join("cython_src", room)
        parts = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith((".pxi", ".h")))
        return Extension(f"stragglar_mpi.{room}.{name}", [os.path.join(folder, name + ".pyx")],
                         depends=parts, **kw)
    exts = [extension("run", "_interpreter", **flags), extension("call", "_entry", **flags)]
    # The schedule's greedy round and round checker: plain C, no MPI.
    exts += [extension("schedule", name, extra_compile_args=["-O3"]) for name in ("_greedy", "_checker")]
    return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True,
                     build_dir=os.path.join("build", "cython"))


def dependencies():
    deps = ["mpi4py>=4.0", "numpy>=1.22"]
    if not os.environ.get("MPICC"):
        deps.append("mpich")  # embedded default: mpiexec and libmpi from PyPI
    return deps


def build_base(flags):
    """build/mpi-<digest of mpi.h>: objects built for one MPI are never reused for another."""
    for folder in flags["include_dirs"]:
        try:
            with open(os.path.join(folder, "mpi.h"), "rb") as header:
                return os.path.join("build", "mpi-" + hashlib.sha1(header.read()).hexdigest()[:10])
        except OSError:
            continue
    return "build"


FLAGS = mpi_flags(find_mpicc())
setup(options={"build": {"build_base": build_base(FLAGS)}},
      ext_modules=extensions(FLAGS), install_requires=dependencies())
