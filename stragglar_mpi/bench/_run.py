"""One timed iteration per (size, draw, algorithm), interleaved within each size."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from .. import Allreduce, stats
from ..core import tags
from ..decide.topology import discover
from ..schedule import build
from ..schedule.algorithms import CHOICES, NATIVE, STRAGGLAR
from ._data import POISON, count_wrong
from . import _cvar

LIBRARY = tuple(a for a in CHOICES if a != NATIVE)     # what stats() reports on
#: native-comp1/-comp4: the MPI's own AllReduce under MPICH's SMP-aware compositions (_cvar.py)
VARIANTS = (NATIVE, "native2") + tuple(_cvar.VARIANTS) + LIBRARY + ("bound",)



@dataclass
class Context:
    """Everything an iteration needs; ``send``/``recv`` are views of the current size."""
    comm: MPI.Intracomm
    op: MPI.Op
    send_all: np.ndarray
    recv_all: np.ndarray
    period: np.ndarray          # one period of the expected result
    offset: float               # this rank's clock minus rank 0's
    count: int = 0
    partners: dict = field(default_factory=dict)
    nodes: tuple | None = None   # the ranks of each node (the bound across nodes), found at its first run
    roles: str = "given"         # "given": tell the library the late rank; else the policy name

    @property
    def send(self):
        return self.send_all[:self.count]

    @property
    def recv(self):
        return self.recv_all[:self.count]


@dataclass(frozen=True)
class Draw:
    """The scenario of one iteration, the same for every algorithm and every rank."""
    straggler: int | None       # the late rank, None when nobody is late
    delay: float                # seconds the straggler sleeps


@dataclass
class Sample:
    """One iteration of one algorithm, gathered on rank 0 (times on rank 0's clock)."""
    draw: Draw
    calls: np.ndarray
    returns: np.ndarray
    wrong: int | None
    ran: str
    phases: list                # stats(comm)["last"] of every rank ({} for native / bound)


def run_one(ctx: Context, variant: str, draw: Draw, check: bool):
    """Time ``variant`` once; rank 0 gets the Sample, the others None."""
    comm = ctx.comm
    if check:
        ctx.recv.fill(POISON)
    comm.Barrier()
    if comm.Get_rank() == draw.straggler:
        time.sleep(draw.delay)
    t_call = MPI.Wtime()
    told = _late_rank(ctx, draw) if variant == "bound" else _designated(ctx, draw)
    _CALLS.get(variant, _library)(ctx, variant, told)
    t_ret = MPI.Wtime()
    _quiet_barrier(comm)
    wrong = count_wrong(ctx.recv, ctx.period) if check and variant != "bound" else None
    last = stats(comm)["last"] if variant in LIBRARY else {}
    rows = comm.gather((t_call - ctx.offset, t_ret - ctx.offset, wrong, last), root=0)
    return None if rows is None else _sample(variant, draw, rows)


def _quiet_barrier(comm):
    """Wait for every rank while sleeping, not spinning: on an oversubscribed node a rank
    that has returned must not take CPU from those still inside the call."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(50e-6)


def _sample(variant, draw, rows):
    calls, returns, wrongs, phases = zip(*rows)
    wrong = None if wrongs[0] is None else sum(wrongs)
    ran = phases[0].get("algorithm", variant) if phases[0] else variant
    return Sample(draw, np.array(calls), np.array(returns), wrong, ran, list(phases))


def _late_rank(ctx, draw):
    return ctx.comm.Get_size() - 1 if draw.straggler is None else draw.straggler


def _designated(ctx, draw):
    """What the library is told: the late rank (else the last rank), or a policy name."""
    return _late_rank(ctx, draw) if ctx.roles == "given" else ctx.roles


def _native(ctx, variant, straggler):
    MPI.Intracomm.Allreduce(ctx.comm, ctx.send, ctx.recv, ctx.op)


def _composed(ctx, variant, straggler):
    """The native call with the variant's control variable set, put back after."""
    with _cvar.setting(variant):
        MPI.Intracomm.Allreduce(ctx.comm, ctx.send, ctx.recv, ctx.op)


def _library(ctx, variant, straggler):
    Allreduce(ctx.comm, ctx.send, ctx.recv, ctx.op, straggler=straggler, algorithm=variant)


def _bound(ctx, variant, straggler):
    """The least time after the arrival, run.  On one node the straggler and its first
    StragglAR partner swap the whole buffer; the rest return.  Across nodes every node
    takes in the whole buffer from the node before it while sending its own to the
    next, all nodes at once, split over the lanes (local rank j to local rank j), once
    every rank has arrived: the traffic every node's link must carry after the arrival
    (schedule/tiers.py floor), on these links and CPUs."""
    comm, rank = ctx.comm, ctx.comm.Get_rank()
    if ctx.nodes is None:
        topology, node_comm = discover(comm)
        node_comm.Free()
        ctx.nodes = topology.nodes
    if len(ctx.nodes) > 1:
        return _shift(ctx, rank)
    partner = partner_of(ctx, straggler)
    peer = partner if rank == straggler else straggler if rank == partner else None
    if peer is not None:
        comm.Sendrecv(ctx.send, peer, tags.BENCH_BOUND, ctx.recv, peer, tags.BENCH_BOUND)


def _shift(ctx, rank):
    """Lane j of node v sends its 1/k of the buffer to lane j of node v+1 and takes in
    lane j's of node v-1 (k: the smallest node's size; other ranks idle)."""
    nodes, k = ctx.nodes, min(map(len, ctx.nodes))
    v = next(i for i, node in enumerate(nodes) if rank in node)
    j = nodes[v].index(rank)
    ctx.comm.Barrier()      # after the arrival: the late rank's node has nothing before it
    if j >= k:
        return
    lo, hi = ctx.count * j // k, ctx.count * (j + 1) // k
    ctx.comm.Sendrecv(ctx.send[lo:hi], nodes[(v + 1) % len(nodes)][j], tags.BENCH_BOUND,
                      ctx.recv[lo:hi], nodes[v - 1][j], tags.BENCH_BOUND)


_CALLS = {NATIVE: _native, "native2": _native, "bound": _bound,
          **{name: _composed for name in _cvar.VARIANTS}}


def partner_of(ctx, straggler):
    if straggler not in ctx.partners:
        first = build(STRAGGLAR, ctx.comm.Get_size(), straggler).rounds[0]
        t = next(t for t in first if straggler in (t.src, t.dst))
        ctx.partners[straggler] = t.dst if t.src == straggler else t.src
    return ctx.partners[straggler]


def draws(n: int, iters: int, straggler, delay, seed: int, size_index: int, nbytes: int) -> list:
    """``iters`` scenarios from a seeded RNG: every rank draws the same ones."""
    rng = np.random.default_rng([seed, size_index])
    out = []
    for _ in range(iters):
        late = _pick(rng, n, straggler)
        out.append(Draw(late, delay.draw(rng, nbytes) if late is not None else 0.0))
    return out


def _pick(rng, n, straggler):
    if straggler == "none":
        return None
    if straggler == "random":
        return int(rng.integers(n))
    return n - 1 if straggler is None else int(straggler)


def rotated(variants, i):
    """Algorithm order for iteration ``i``: rotated so none always runs first."""
    k = i % len(variants)
    return list(variants[k:]) + list(variants[:k])
