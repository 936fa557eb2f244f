"""Command line: ``python -m stragglar_mpi info`` and ``--version``."""
from __future__ import annotations

import argparse
import sys


def info() -> dict:
    """What this installation runs on: MPI, the compiled transport, CUDA."""
    import mpi4py
    from mpi4py import MPI

    from . import __version__
    from .call import _entry
    from .core import features as _features
    from .run import _interpreter

    lib = MPI.Get_library_version().replace("\0", "").strip().splitlines()
    return {
        "stragglar_mpi": __version__,
        "mpi4py": mpi4py.__version__,
        "MPI library": lib[0] if lib else "unknown",
        "MPI standard": "%d.%d" % MPI.Get_version(),
        "MPI features": _mpi_features(_features, _interpreter),
        "compiled transport": f"loaded ({_interpreter.__file__})",
        "compiled entry": f"loaded ({_entry.__file__})",
        **_cuda_info(),
    }


def _mpi_features(features, p2p) -> str:
    found = [f"large-count calls {'yes' if features.large_count() else 'no'}",
             f"persistent collectives {'yes' if features.persistent_collectives() else 'no'}"]
    if p2p is not None:
        built = p2p.built_for()
        found.append("compiled for MPI %d.%d (%s)" % (*built["mpi_version"], (
            "large-count calls" if built["large_count"]
            else "int counts; more than 2**31-1 elements as one derived datatype")))
    return "; ".join(found)


def _cuda_info() -> dict:
    try:
        from .memory import cuda as _cuda
    except ImportError:
        return {"CUDA": "not available (install the [cuda] extra)"}
    return _cuda.info()


def main(argv=None) -> int:
    from ._version import __version__

    parser = argparse.ArgumentParser(
        prog="python -m stragglar_mpi",
        description="StragglAR AllReduce for MPI. Commands: info (what this installation runs on). "
                    "Benchmarks: python -m stragglar_mpi.bench; demo: mpiexec -n 8 python -m stragglar_mpi.bench.demo; "
                    "schedules: python -m stragglar_mpi.schedule.")
    parser.add_argument("--version", action="version", version=f"stragglar_mpi {__version__}")
    parser.add_argument("command", nargs="?", default="info", choices=["info"])
    parser.parse_args(argv)
    width = 20
    for key, value in info().items():
        print(f"{key:<{width}} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
