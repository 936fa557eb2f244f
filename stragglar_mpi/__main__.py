"""Command line: ``python -m stragglar_mpi info`` (the default), ``trace DIR``, ``timeline DIR``
and ``--version``."""
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
    args = _parser().parse_args(argv)
    if args.command == "trace":
        from .bench import trace
        return trace.main(args.dir)
    if args.command == "timeline":
        from .bench import timeline
        return timeline.main(args.dir, args.output, comm=args.comm, calls=args.calls)
    width = 20
    for key, value in info().items():
        print(f"{key:<{width}} {value}")
    return 0


def _parser() -> argparse.ArgumentParser:
    from ._version import __version__

    parser = argparse.ArgumentParser(
        prog="python -m stragglar_mpi",
        description="StragglAR AllReduce for MPI. Commands: info (what this installation runs on, "
                    "the default), trace and timeline (read STRAGGLAR_TRACE's files). "
                    "Benchmarks: python -m stragglar_mpi.bench; demo: mpiexec -n 8 python -m stragglar_mpi.bench.demo; "
                    "schedules: python -m stragglar_mpi.schedule.")
    parser.add_argument("--version", action="version", version=f"stragglar_mpi {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{info,trace,timeline}")
    commands.add_parser("info", help="what this installation runs on: MPI, the compiled transport, CUDA")
    trace = commands.add_parser(
        "trace", help="where the ranks of a STRAGGLAR_TRACE directory first disagree",
        description="Merge the rank-NNNNN.jsonl files that STRAGGLAR_TRACE=DIR wrote and say, per "
                    "communicator, the first call where the ranks disagree (who never arrived, who "
                    "passed other arguments, who is a call behind, whose file is missing) and which "
                    "calls did not return; or, when all agree, who was last most often. Exit status: "
                    "0 all agree, 1 a disagreement (or a call that failed or did not return), 2 bad input.")
    trace.add_argument("dir", help="the directory STRAGGLAR_TRACE named")
    timeline = commands.add_parser(
        "timeline", help="draw a STRAGGLAR_TRACE directory's calls, one row per rank (needs matplotlib)",
        description="Draw one communicator's calls from STRAGGLAR_TRACE's files: a row per rank, each "
                    "call's arrival, phase 1, the wait for the straggler and phase 2, in ms from the "
                    "first arrival shown; calls that never returned are drawn open to the file's write "
                    "time. Needs the plot extra: pip install stragglar_mpi[plot].")
    timeline.add_argument("dir", help="the directory STRAGGLAR_TRACE named")
    timeline.add_argument("-o", "--output", default="timeline.png", help="the PNG to write (default %(default)s)")
    timeline.add_argument("--comm", help="the communicator, by name or ident (default: the one with most calls)")
    timeline.add_argument("--calls", type=_call_range, metavar="FIRST:LAST",
                          help="the calls (seq, both ends included; 10:20, 10:, :20; default the last 20)")
    return parser


def _call_range(text: str) -> tuple:
    """"10:20" -> (10, 20); an empty end is open (None)."""
    first, sep, last = text.partition(":")
    try:
        found = (int(first) if first else None, int(last) if last else None)
    except ValueError:
        found = None
    if not sep or found is None or (None not in found and found[0] > found[1]):
        raise argparse.ArgumentTypeError(f"--calls wants FIRST:LAST (seq numbers, FIRST <= LAST), not {text!r}")
    return found


if __name__ == "__main__":
    sys.exit(main())
