"""The benchmark's command line: its flags, their parsers and the checks made before any work.

Sizes, times and bandwidths go through the library's one parser (schedule/units.py):
every flag takes a unit (``64M``, ``30ms``, ``3us``, ``25GB/s``) and a bare number is
read in the unit its --help names.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import numpy as np

from ..core.config import current as current_settings
from ..schedule.algorithms import AUTO, CHOICES, NATIVE, SHOWN
from ..schedule.units import MiB, bandwidth_in, format_size, parse_size, time_in
from . import _cvar, _data, _run

_MS = time_in("ms")


@dataclass(frozen=True)
class Delay:
    """The straggler's sleep: ``kind`` in fixed / uniform / exp / normal (ms), plus ms per MiB."""
    kind: str
    a: float
    b: float = 0.0
    per_mib: float = 0.0

    def draw(self, rng, nbytes: int) -> float:
        """Seconds; every rank draws the same value from the same RNG state."""
        base = {"fixed": lambda: self.a, "uniform": lambda: rng.uniform(self.a, self.b),
                "exp": lambda: rng.exponential(self.a),
                "normal": lambda: rng.normal(self.a, self.b)}[self.kind]()
        return max(0.0, float(base) + self.per_mib * nbytes / MiB) / 1e3


def parse_delay(text: str) -> Delay:
    """'200' | 'fixed:200' | 'uniform:100:300' | 'exp:200' | 'normal:200:20': milliseconds,
    or times with a unit ('30ms', 'uniform:0.1s:0.3s')."""
    parts = str(text).split(":")
    kind, nums = (("fixed", parts) if len(parts) == 1 else (parts[0], parts[1:]))
    arity = {"fixed": 1, "uniform": 2, "exp": 1, "normal": 2}
    try:
        values = [_MS(v) for v in nums]
        if arity.get(kind) != len(values):
            raise ValueError
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"not a delay: {text!r} (MS, fixed:MS, uniform:LO:HI, exp:MEAN, normal:MEAN:SD)") from None
    return Delay(kind, *values)


def parse_straggler(text: str):
    text = str(text).strip().lower()
    if text in ("random", "none") or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"--straggler takes a rank, 'random' or 'none', not {text!r}")


def _at_least(low):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def parse_algorithms(text: str) -> tuple:
    names = tuple(a.strip().lower() for a in text.split(",") if a.strip())
    unknown = [a for a in names if a not in _run.VARIANTS or a == "bound"]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown algorithm(s) {unknown}; choose from {', '.join(_run.VARIANTS[:-1])}")
    return names


class _Help(argparse.HelpFormatter):
    """Shows a flag's default unless it has none."""

    def _get_help_string(self, action):
        if (action.default in (None, False, argparse.SUPPRESS) or "default" in action.help
                or action.option_strings == ["-h", "--help"]):
            return action.help
        return action.help + " (default: %(default)s)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m stragglar_mpi.bench",
        description="AllReduce with an injected straggler: StragglAR vs native MPI, Ring, RHD. "
                    "Run under mpiexec with at least 2 ranks; rank 0 prints.",
        formatter_class=_Help)
    a = p.add_argument
    a("-b", "--minbytes", type=parse_size, default="1M", help="smallest buffer (8, 64K, 1M, ...)")
    a("-e", "--maxbytes", type=parse_size, default="64M", help="largest buffer")
    a("-f", "--stepfactor", type=_at_least(1), default=2,
      help="multiply the size by this between steps (1: one size)")
    a("-n", "--iters", type=_at_least(1), default=10, help="timed iterations per size and algorithm")
    a("--min-iters", type=_at_least(1), default=3, help="never fewer timed iterations than this")
    a("--shrink-above", type=parse_size, default="32M",
      help="above this size the iterations shrink in proportion to the size")
    a("-w", "--warmup", type=_at_least(0), default=1, help="untimed iterations (no delay) per size and algorithm")
    a("--warmup-delayed", action="store_true",
      help="the warm-up iterations keep the first iteration's straggler and delay, so that auto "
           "starts the timed ones with a history, as in a job's steady state")
    a("-d", "--datatype", choices=_data.DTYPES, default="float32", help="element type")
    a("-o", "--op", choices=sorted(_data.OPS), default="sum", help="reduction")
    a("--delay", type=parse_delay, default="100",
      help="the straggler's delay: MS, fixed:MS, uniform:LO:HI, exp:MEAN or normal:MEAN:SD; "
           "bare numbers in ms, or with a unit (30ms, 0.1s)")
    a("--delay-per-mib", type=_MS, default=0.0,
      help="added to the delay per MiB of buffer, so large sizes still hide the ReduceScatter; "
           "a bare number in ms, or with a unit (2ms)")
    a("--straggler", type=parse_straggler, default=None,
      help="the late rank: a rank, 'random' (redrawn each iteration, same on all ranks) or "
           "'none' (nobody sleeps; use with --delay 0); default: the last rank")
    a("--roles", choices=("given", "arrival", "predict"), default=None,
      help="what the library is told: 'given' passes the late rank as straggler=; 'arrival' and "
           "'predict' let the library find it (straggler='arrival' / 'predict'); "
           "default: given, or arrival with --scenario")
    a("--scenario", choices=("persistent", "moving", "none"), default=None,
      help="shorthand: persistent = the last rank late every time; moving = a random rank each "
           "iteration; none = nobody late (--delay 0); all with --roles arrival unless given; "
           "sets the straggler, so not with --straggler")
    a("--seed", type=int, default=0, help="seed of the straggler and delay draws")
    a("--layout", choices=("as-is", "block", "cyclic"), default="as-is",
      help="renumber the ranks so that nodes hold consecutive ranks (block, Slurm's default) or "
           "node i holds ranks i, i+m, ... (cyclic, MPICH's emulated cliques); as-is keeps them")
    a("-a", "--algorithms", type=parse_algorithms, default=",".join(SHOWN + (AUTO,)),
      help=f"comma-separated, from {NATIVE} (plain comm.Allreduce), "
           f"{', '.join(a for a in CHOICES[1:] if a != NATIVE)}, {AUTO}; "
           "native2 runs native again: its ratio to native is the noise of the measurement; "
           "native-comp1 / native-comp4 run native under MPICH's SMP-aware compositions "
           "(MPIR_CVAR_ALLREDUCE_COMPOSITION=1: node reduce, roots' AllReduce, node bcast; "
           "=4: multi-leader), set through MPI_T for that call only (MPICH only)")
    a("--no-bound", action="store_true",
      help="skip the lower bound (one node: the straggler and a partner swap the whole buffer; "
           "across nodes: every node takes in the whole buffer, all at once)")
    a("--check", choices=("first", "all", "none"), default="first",
      help="which timed iterations are validated (receive buffer poisoned first, wrong elements counted)")
    a("--alpha", type=time_in("us"), default=None,
      help="model latency: a bare number in us, or with a unit (3us, 0.01ms) "
           "(default: measured, 8 B ping-pong)")
    a("--bandwidth", type=bandwidth_in("GB/s"), default=None,
      help="model bandwidth: a bare number in GB/s, or with a unit (25GB/s, 100Gb/s) "
           "(default: measured, ping-pong of the largest size up to 64M)")
    a("--json", metavar="FILE", help="write every result and the configuration as JSON")
    a("--plot", metavar="FILE.png", help="plot post-arrival speedup over native against size (matplotlib)")
    a("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return p


def sizes(args) -> list:
    out, s = [], args.minbytes
    while s <= args.maxbytes:
        out.append(s)
        if args.stepfactor <= 1:
            break
        s *= args.stepfactor
    return out


def iterations(args, nbytes: int) -> int:
    if nbytes <= args.shrink_above:
        return args.iters
    return max(args.min_iters, min(args.iters, round(args.iters * args.shrink_above / nbytes)))


def problem(args, comm):
    """What is wrong with the command line, found before any work (every rank alike);
    --scenario is applied first."""
    return _scenario_problem(args) or _apply_scenario(args, comm.Get_size()) or _problem(args, comm)


def _scenario_problem(args):
    if args.scenario is not None and args.straggler is not None:
        return f"--scenario {args.scenario} chooses the late rank: give --scenario or --straggler, not both"
    return None


def _apply_scenario(args, n):
    if args.scenario is None:
        args.roles = args.roles or "given"
        return
    args.straggler = {"persistent": str(n - 1), "moving": "random", "none": "none"}[args.scenario]
    if args.scenario == "none":
        args.delay = parse_delay("0")
    args.roles = args.roles or "arrival"


def _problem(args, comm):
    """What is wrong with the command line, found before any work (every rank alike)."""
    n = comm.Get_size()
    if n < 2:
        return "needs at least 2 ranks (mpiexec -n N ...)"
    if current_settings().algo:
        return "unset STRAGGLAR_ALGO: it would force one algorithm on every row"
    if args.straggler not in (None, "random", "none") and int(args.straggler) >= n:
        return f"--straggler {args.straggler} is not a rank of {n} (0..{n - 1})"
    for variant in args.algorithms:
        if variant in _cvar.VARIANTS and _cvar.problem(variant):
            return _cvar.problem(variant)
    if args.minbytes > args.maxbytes:
        return (f"-b/--minbytes {format_size(args.minbytes)} is larger than -e/--maxbytes "
                f"{format_size(args.maxbytes)}")
    if not [s for s in sizes(args) if s >= np.dtype(args.datatype).itemsize]:
        return (f"no size in the sweep holds one {args.datatype} element "
                f"({np.dtype(args.datatype).itemsize} bytes)")
    return _output_problem(args.json, "--json") or _output_problem(args.plot, "--plot") or _plot_problem(args)


def _output_problem(path, flag):
    """Whether ``path`` can be written (checked before the sweep, not after it)."""
    if not path:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{flag} {path} is a directory"
    if not os.path.isdir(folder):
        return f"{flag} {path}: the directory {folder} does not exist"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{flag} {path}: not writable"
    return None


def _plot_problem(args):
    if not args.plot:
        return None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return '--plot needs matplotlib: pip install "stragglar_mpi[plot]"'
    return None
