"""Build the Cython transport against the MPI that mpi4py uses.

The compiler wrapper is $MPICC when set (a cluster's own MPI), otherwise the
`mpicc` of the `mpich` wheel from PyPI (the embedded default).  We only ask the
wrapper for its flags and compile with the regular compiler, so the same code
works with MPICH (`-show`) and Open MPI (`--showme`).  No rpath is kept: at run
time libmpi is the one mpi4py has already loaded (we always import mpi4py first).
"""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup


def find_mpicc():
    cand = os.environ.get("MPICC") or shutil.which("mpicc")
    if not cand:
        local = os.path.join(os.path.dirname(sys.executable), "mpicc")
        cand = local if os.path.exists(local) else None
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


def extensions():
    import mpi4py
    from Cython.Build import cythonize

    flags = mpi_flags(find_mpicc())
    flags["include_dirs"].insert(0, mpi4py.get_include())
    exts = [Extension(f"stragglar_mpi.{name}", [f"cython_src/{name}.pyx"], **flags)
            for name in ("_p2p", "_bind")]
    return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True)


def dependencies():
    deps = ["mpi4py>=4.0", "numpy>=1.22"]
    if not os.environ.get("MPICC"):
        deps.append("mpich")  # embedded default: mpiexec and libmpi from PyPI
    return deps


setup(ext_modules=extensions(), install_requires=dependencies())
