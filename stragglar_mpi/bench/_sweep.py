"""The benchmark's sweep: sizes, draws, interleaved algorithms, table, JSON, plot."""
from __future__ import annotations

import os
import platform
import sys
import time
from collections import Counter

import numpy as np
from mpi4py import MPI

from .. import Allreduce, __version__
from ..schedule.algorithms import STRAGGLAR
from ..schedule.units import format_size
from . import _clock, _data, _model, _report, _run
from ._args import Delay, iterations, parser, problem, sizes

_MIB = 1 << 20


def main(argv=None, comm=None) -> int:
    """Run the benchmark on ``comm`` (default COMM_WORLD); every rank must call it."""
    comm = MPI.COMM_WORLD if comm is None else comm
    args = parser().parse_args(argv)
    comm = relayout(comm, args.layout)
    wrong = problem(args, comm)
    if wrong:
        if comm.Get_rank() == 0:
            print(f"stragglar_mpi.bench: {wrong}", file=sys.stderr)
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
    """Build every straggler's plans now (the schedule, this rank's slice), not inside a
    timed call."""
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
        "stragglar_mpi": __version__,
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
        f"({c['cpus']} CPUs, {c['cpu']} on {c['host']}), {c['mpi']}",
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
