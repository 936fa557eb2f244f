"""Command line and the sweep: sizes, draws, interleaved algorithms, table, JSON, plot."""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .. import Allreduce, __version__
from ..core.config import current as current_settings
from ..run.transport import name as transport_name
from ..schedule.units import format_size, parse_size
from . import _clock, _cvar, _data, _model, _report, _run
from ..schedule.algorithms import AUTO, CHOICES, NATIVE, SHOWN, STRAGGLAR

_MIB = 1 << 20


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
        return max(0.0, float(base) + self.per_mib * nbytes / _MIB) / 1e3


def parse_delay(text: str) -> Delay:
    """'200' | 'fixed:200' | 'uniform:100:300' | 'exp:200' | 'normal:200:20' (milliseconds)."""
    parts = str(text).split(":")
    kind, nums = (("fixed", parts) if len(parts) == 1 else (parts[0], parts[1:]))
    arity = {"fixed": 1, "uniform": 2, "exp": 1, "normal": 2}
    try:
        values = [float(v) for v in nums]
        if arity.get(kind) != len(values) or min(values) < 0:
            raise ValueError
    except ValueError:
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
      help="the straggler's delay in ms: MS, fixed:MS, uniform:LO:HI, exp:MEAN or normal:MEAN:SD")
    a("--delay-per-mib", type=_non_negative, default=0.0,
      help="ms added to the delay per MiB of buffer, so large sizes still hide the ReduceScatter")
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
      help="skip the lower bound (one node: the straggler and a partner swap the whole buffer; across nodes: every node takes in the whole buffer, all at once)")
    a("--check", choices=("first", "all", "none"), default="first",
      help="which timed iterations are validated (receive buffer poisoned first, wrong elements counted)")
    a("--alpha", type=_non_negative, default=None,
      help="model latency in us (default: measured, 8 B ping-pong)")
    a("--bandwidth", type=_positive, default=None,
      help="model bandwidth in GB/s (default: measured, ping-pong of the largest size up to 64M)")
    a("--json", metavar="FILE", help="write every result and the configuration as JSON")
    a("--plot", metavar="FILE.png", help="plot post-arrival speedup over native against size (matplotlib)")
    a("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _number(text, low, strict):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > low if strict else value >= low) or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be {'above' if strict else 'at least'} {low:g} "
                                         f"and finite, got {text!r}")
    return value


def _positive(text):
    return _number(text, 0.0, True)


def _non_negative(text):
    return _number(text, 0.0, False)


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


def main(argv=None, comm=None) -> int:
    """Run the benchmark on ``comm`` (default COMM_WORLD); every rank must call it."""
    comm = MPI.COMM_WORLD if comm is None else comm
    args = parser().parse_args(argv)
    comm = relayout(comm, args.layout)
    problem = _scenario_problem(args) or _apply_scenario(args, comm.Get_size()) or _problem(args, comm)
    if problem:
        if comm.Get_rank() == 0:
            print(f"stragglar_mpi.bench: {problem}", file=sys.stderr)
        return 2
    run(args, comm, argv)
    return 0


def relayout(comm, layout):
    """``comm`` renumbered so that its nodes are blocks of ranks or cyclic; collective."""
    if layout == "as-is":
        return comm
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    leader = comm.allgather(node.allreduce(comm.Get_rank(), op=MPI.MIN))
    firsts = sorted(set(leader))
    index, local = firsts.index(leader[comm.Get_rank()]), node.Get_rank()
    node.Free()
    if layout == "block":   # node index first: the nodes become blocks of consecutive ranks
        key = index * comm.Get_size() + local
    else:                   # local rank first: node i holds ranks i, i+m, ...
        key = local * len(firsts) + index
    return comm.Split(0, key)


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


def run(args, comm, argv=None) -> list | None:
    """The sweep; rank 0 returns the result rows, the others None."""
    dtype = np.dtype(args.datatype)
    todo = [s for s in sizes(args) if s >= dtype.itemsize]
    ctx = _context(comm, args, dtype, max(todo))
    link = _link(comm, args, max(todo))
    config = _config(args, comm, link, ctx, sys.argv[1:] if argv is None else argv)
    variants = args.algorithms + (() if args.no_bound else ("bound",))
    rows, start = [], time.perf_counter()
    if comm.Get_rank() == 0:
        print(_preamble(config), flush=True)
    for k, nbytes in enumerate(todo):
        ctx.count = nbytes // dtype.itemsize
        samples = _measure(ctx, args, variants, k, nbytes)
        if samples is not None:
            rows += _finish_size(args, samples, comm.Get_size(), nbytes, link, (k, len(todo), start))
    if comm.Get_rank() != 0:
        return None
    _write(args, config, rows)
    return rows


def _context(comm, args, dtype, max_bytes):
    count = max_bytes // dtype.itemsize
    send, recv = np.empty(count, dtype), np.empty(count, dtype)
    _data.fill(send, _data.contribution(comm.Get_rank(), args.op, dtype))
    recv.fill(_data.POISON)     # touch every page before timing
    ctx = _run.Context(comm, _data.OPS[args.op][0], send, recv,
                       _data.expected(comm.Get_size(), args.op, dtype), _clock.offsets(comm),
                       roles=args.roles)
    _prewarm(ctx)
    return ctx


def _prewarm(ctx):
    """Build every straggler's sub-communicator now, not inside a timed call."""
    ctx.count = min(ctx.send_all.size, 64)
    for late in range(ctx.comm.Get_size()):
        Allreduce(ctx.comm, ctx.send, ctx.recv, ctx.op, straggler=late, algorithm=STRAGGLAR)


def _link(comm, args, max_bytes):
    """(alpha s, bandwidth B/s, tiers) for the model: the flags, else a ping-pong; tiers:
    the library's two tiers measured at setup when the communicator spans nodes (the
    model then prices with them), else None."""
    alpha, bandwidth = args.alpha, args.bandwidth
    if alpha is None or bandwidth is None:
        m_alpha, m_bw = _model.link(comm, min(max_bytes, 64 * _MIB))
        alpha = m_alpha * 1e6 if alpha is None else alpha
        bandwidth = m_bw / 1e9 if bandwidth is None else bandwidth
    return alpha * 1e-6, bandwidth * 1e9, _model.tiers_of(comm)


def _measure(ctx, args, variants, k, nbytes):
    """Warm up, then the timed iterations, algorithms interleaved; rank 0 gets the samples."""
    n = ctx.comm.Get_size()
    todo = _run.draws(n, iterations(args, nbytes), args.straggler, _delay(args), args.seed, k, nbytes)
    warm = _run.Draw(todo[0].straggler, todo[0].delay if args.warmup_delayed else 0.0)
    for variant in variants:
        for _ in range(args.warmup):
            _run.run_one(ctx, variant, warm, check=False)
    samples = {v: [] for v in variants}
    for i, draw in enumerate(todo):
        check = args.check == "all" or (args.check == "first" and i == 0)
        for variant in _run.rotated(variants, i):
            s = _run.run_one(ctx, variant, draw, check)
            if s is not None:
                samples[variant].append(s)
    return samples if ctx.comm.Get_rank() == 0 else None


def _delay(args):
    d = args.delay
    return Delay(d.kind, d.a, d.b, args.delay_per_mib)


def _finish_size(args, samples, n, nbytes, link, progress):
    rows = [_report.summarise(v, s, n, nbytes, link) for v, s in samples.items()]
    _report.compare(rows)
    for r in rows:
        print(_report.line(r), flush=True)
    k, total, start = progress
    if not args.quiet:
        print(f"[{k + 1}/{total}] {format_size(nbytes)}: {rows[0]['iters']} iterations, "
              f"{time.perf_counter() - start:.0f} s so far", file=sys.stderr, flush=True)
    return rows


def _tiers_config(tiers):
    if tiers is None:
        return None
    m, k, least, (a1, b1, a2, b2) = _model.shape(tiers)
    return {"nodes": m, "largest": k, "smallest": least, "alpha_intra_us": a1 * 1e6,
            "bandwidth_intra_GBps": b1 / 1e9, "alpha_inter_us": a2 * 1e6, "bandwidth_inter_GBps": b2 / 1e9}


def _hosts(comm) -> dict:
    """{host name: ranks on it}, in the order of the ranks' first appearance."""
    return dict(Counter(comm.allgather(platform.node())))


def _config(args, comm, link, ctx, argv) -> dict:
    offsets = comm.gather(ctx.offset, root=0)
    hosts = _hosts(comm)
    return {
        "command": " ".join(["python -m stragglar_mpi.bench", *map(str, argv)]),
        "args": {k: (v if not isinstance(v, Delay) else vars(v)) for k, v in vars(args).items()},
        "ranks": comm.Get_size(),
        "host": platform.node(), "hosts": hosts, "cpus": os.cpu_count(), "cpu": _cpu_model(),
        "mpi": " ".join(MPI.Get_library_version().replace("\0", " ").split("\n")[0].split()),   # Open MPI's ends in NUL
        "stragglar_mpi": __version__, "transport": transport_name(),
        "alpha_us": link[0] * 1e6, "bandwidth_GBps": link[1] / 1e9, "tiers": _tiers_config(link[2]),
        "clock_offsets_us": None if offsets is None else [o * 1e6 for o in offsets],
        "env": {k: v for k, v in os.environ.items() if k.startswith(("MPIR_CVAR", "STRAGGLAR_"))},
    }


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                        platform.processor())
    except OSError:
        return platform.processor()


def _model_line(c) -> str:
    t = c.get("tiers")
    if not t:
        return f"# model: alpha {c['alpha_us']:.2f} us, bandwidth {c['bandwidth_GBps']:.2f} GB/s"
    nodes = (f"{t['nodes']} nodes of {t['largest']}" if t["largest"] == t["smallest"] else
             f"{t['nodes']} nodes of {t['smallest']}-{t['largest']}")
    return (f"# model: two tiers measured at setup, {nodes}: inside a node alpha "
            f"{t['alpha_intra_us']:.2f} us, {t['bandwidth_intra_GBps']:.2f} GB/s; between nodes alpha "
            f"{t['alpha_inter_us']:.2f} us, {t['bandwidth_inter_GBps']:.2f} GB/s; bound: the floor")


def _where(c) -> str:
    hosts = c.get("hosts") or {c["host"]: c["ranks"]}
    if len(hosts) == 1:
        return next(iter(hosts))
    return f"{len(hosts)} hosts: " + ", ".join(f"{h} ({k})" for h, k in hosts.items())


def _preamble(c) -> str:
    a = c["args"]
    d = a["delay"]
    straggler = a["straggler"] if a["straggler"] is not None else f"{c['ranks'] - 1} (last)"
    offs = max(abs(o) for o in c["clock_offsets_us"])
    lines = [
        f"# stragglar_mpi.bench {c['stragglar_mpi']}: {c['ranks']} ranks on {_where(c)} "
        f"({c['cpus']} CPUs, {c['cpu']} on {c['host']}), {c['mpi']}, transport {c['transport']}",
        f"# {a['datatype']} {a['op']}, straggler {straggler}, delay {d['kind']} "
        f"{d['a']:g}{':%g' % d['b'] if d['kind'] in ('uniform', 'normal') else ''} ms"
        f" + {a['delay_per_mib']:g} ms/MiB, check {a['check']}, seed {a['seed']}",
        _model_line(c) + f"; clock offsets to rank 0 up to {offs:.1f} us",
        "# post: from the straggler's call to the last return; total: from the first call; "
        "algbw/busbw on the post median;",
        "# xnative: native median / this median; xbound: this median / bound median; "
        "model: the prediction; floor: the least any schedule can take after the arrival; "
        "RS: slowest early rank's ReduceScatter",
        _report.header(),
    ]
    return "\n".join(lines)


def _write(args, config, rows):
    if args.json:
        _report.write_json(args.json, config, rows)
    if args.plot:
        from .plot import plot
        plot([{"config": config, "results": rows}], args.plot)
