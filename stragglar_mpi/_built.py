"""The compiled modules (built from cython_src/ by setup.py) are part of the package:
a tree that was not built fails at import, once, with how to build it."""
import os
from importlib.machinery import EXTENSION_SUFFIXES

COMPILED = ("run/_interpreter", "call/_entry", "schedule/_greedy", "schedule/_checker")


def require_build():
    here = os.path.dirname(__file__)
    missing = [name for name in COMPILED
               if not any(os.path.exists(os.path.join(here, name + s)) for s in EXTENSION_SUFFIXES)]
    if missing:
        raise ImportError(
            f"stragglar_mpi: the compiled modules are not built ({', '.join(missing)} in {here}). "
            "Install the package (`pip install .`, or `make install`), or build them in this "
            "tree with `python setup.py build_ext --inplace`; to build against a cluster's MPI, "
            "set MPICC to its compiler wrapper first (docs/BUILDING.md).")
