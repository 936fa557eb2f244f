"""Build the Cython transport against the MPI that mpi4py uses (and the schedule's
compiled greedy round and round checker, which need no MPI).

The compiler wrapper is $MPICC when set (a cluster's own MPI), otherwise the
`mpicc` of the `mpich` wheel from PyPI (the embedded default).  We only ask the
wrapper for its flags and compile with the regular compiler, so the same code
works with MPICH (`-show`) and Open MPI (`--showme`).  No rpath is kept: at run
time libmpi is the one mpi4py has already loaded (we always import mpi4py first).
MPI-4 calls are used only where mpi.h says MPI_VERSION >= 4 (stragglar_mpi/run/mpi_compat.h),
so the same sources build against MPI-3.1 libraries (Open MPI 4.1 and 5, ...).
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
    """Each Cython source sits in the room it serves: stragglar_mpi/<room>/<name>.pyx
    builds stragglar_mpi.<room>.<name>, its .pxi parts beside it."""
    import mpi4py
    from Cython.Build import cythonize

    compat = "stragglar_mpi/run/mpi_compat.h"
    flags["include_dirs"][:0] = [mpi4py.get_include(), os.path.dirname(compat)]

    def extension(path, depends=(), **kw):
        folder = os.path.dirname(path)
        parts = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".pxi"))
        return Extension(path.replace("/", "."), [path + ".pyx"], depends=[*depends, *parts], **kw)
    exts = [extension(path, [compat], **flags)
            for path in ("stragglar_mpi/run/_interpreter", "stragglar_mpi/call/_entry")]
    # The schedule's greedy round and round checker (plain C, no MPI): their NumPy twins
    # stay in greedy.py and verify.py.
    exts += [extension(f"stragglar_mpi/schedule/{name}", extra_compile_args=["-O3"])
             for name in ("_greedy", "_checker")]
    return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True)


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
