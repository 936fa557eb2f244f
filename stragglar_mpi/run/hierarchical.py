"""``algorithm="hierarchical"``: two plans, phase 1 on the early ranks and phase 2.

Both phases are schedules (schedule/hierarchical.py has the whole design): phase 1
(``phase1``, "reduce_to_owners") reduces each chunk along its lane to its owner on
the straggler's node while the straggler is late; phase 2 (``hierarchical``) starts
with the straggler's raw chunks.  Each rank compiles its slice of both into plans and
runs them one after the other with the same interpreter; phase 1's rounds are
numbered after phase 2's, so the two never share a tag.  The pieces per slice come
from the two-tier model (schedule/tiers.py ``pieces``) for the buffer's size and the
communicator's links, the same on every rank.

``algorithm="hring"``: the synchronous hierarchical ring (schedule/hierarchical.py
``hring``: ReduceScatter inside each node, a ring per lane across the nodes, AllGather
inside), one plan per rank, run by the same interpreter in the call's memory.  Every
chunk is reduced at one place and then copied, so every rank ends with the same bits.
"""
from __future__ import annotations

from functools import lru_cache

from mpi4py import MPI

from . import transport as _transport
from .plan import compile_rounds
from ..schedule import verify
from ..schedule.hierarchical import hierarchical, hring, owners_of, phase1, pieces_for, rank_rounds
from ..schedule.tiers import pieces as model_pieces

#: Up to this many ranks a process verifies both whole schedules once per (nodes,
#: straggler, pieces); above, it builds only its own slice of each (the tests verify
#: the construction on block, cyclic and unequal layouts).
VERIFY_UP_TO = 256


def applies(topology, straggler) -> bool:
    """Whether the hierarchical schedule differs from flat StragglAR here."""
    return not topology.flat and len(topology.node(straggler)) > 1


def hring_applies(topology) -> bool:
    """Whether the hierarchical ring differs from the flat ring here (several nodes, one
    of them with a second rank)."""
    return not topology.flat


@lru_cache(maxsize=16)
def _hring_slices(nodes):
    """(chunks, every rank's rounds) of the verified hierarchical ring for ``nodes``."""
    schedule = hring(nodes)
    if schedule.n <= VERIFY_UP_TO:
        verify(schedule)
    mine = [[] for _ in range(schedule.n)]
    for rnd in schedule.rounds:
        by_rank = [[] for _ in range(schedule.n)]
        for t in rnd:
            by_rank[t.src].append(t)
            if t.dst != t.src:
                by_rank[t.dst].append(t)
        for r in range(schedule.n):
            mine[r].append(tuple(by_rank[r]))
    return schedule.chunks, tuple(tuple(rounds) for rounds in mine)


@lru_cache(maxsize=256)
def hring_plan(nodes, rank, count, extent, in_place, commutative):
    """(chunks, plan) of ``rank`` in the hierarchical ring."""
    chunks, slices = _hring_slices(nodes)
    return chunks, compile_rounds(list(slices[rank]), chunks, rank, count, extent, in_place,
                                  commutative)


def run_hring(seq, args, transport, deadline, memory, commutative):
    """Generator: this rank's plan of the hierarchical ring; returns (end of phase 1 =
    now, first receive)."""
    comm, out, dt = seq.private, args.out, args.out.datatype
    _, plan = hring_plan(seq.topology.nodes, comm.Get_rank(), out.count, out.extent,
                         args.in_place, commutative)
    with memory.lease(seq) as lease:
        addresses = (args.src.address, out.address, memory.scratch(lease, plan.scratch_bytes))
        local = memory.local(dt, args.op)
        t_p1 = MPI.Wtime()
        first = yield from _transport.run(plan, addresses, comm, dt, args.op, transport, deadline,
                                          local, None, seq.tag0)
    return t_p1, first


@lru_cache(maxsize=32)
def _verified(nodes, straggler, pieces):
    verify(phase1(nodes, straggler, pieces))
    verify(hierarchical(nodes, straggler, pieces))


@lru_cache(maxsize=256)
def plan_for(nodes, straggler, rank, count, extent, in_place, commutative, pieces):
    """(phase-1 plan, phase-2 plan) of ``rank``."""
    if sum(map(len, nodes)) <= VERIFY_UP_TO:
        _verified(nodes, straggler, pieces)
    chunks, first = rank_rounds(nodes, straggler, rank, pieces, phase=1)
    _, second = rank_rounds(nodes, straggler, rank, pieces, phase=2)
    prepared = frozenset(c for c, r in enumerate(owners_of(nodes, straggler, pieces)) if r == rank)
    after = [()] * len(second) + list(first)     # phase 1's tags apart from phase 2's
    plan1 = compile_rounds(after, chunks, rank, count, extent, in_place, commutative)
    plan2 = compile_rounds(second, chunks, rank, count, extent, in_place, commutative, prepared)
    return plan1, plan2


def pieces_of(seq, nbytes) -> int:
    """Pieces per slice: the model's for ``nbytes`` and the measured links."""
    topo, links = seq.topology, seq.links
    m, k = len(topo.nodes), max(len(node) for node in topo.nodes)
    if links is None:
        return pieces_for(m)
    return model_pieces(m, k, nbytes, links.alpha_intra, links.bandwidth_intra,
                        links.alpha_inter, links.bandwidth_inter)


def run(seq, straggler, args, transport, deadline, memory, commutative):
    """Generator: phase 1 (early ranks) and the plan, in the call's memory (``memory``: a
    backend; device pointers with a CUDA-aware MPI, their REDUCE rows as kernels);
    returns (end of phase 1, first receive)."""
    comm, out, dt = seq.private, args.out, args.out.datatype
    rank, topo = comm.Get_rank(), seq.topology
    pieces = pieces_of(seq, out.count * out.extent)
    plan1, plan2 = plan_for(topo.nodes, straggler, rank, out.count, out.extent, args.in_place,
                               commutative, pieces)
    with memory.lease(seq) as lease:
        scratch = memory.scratch(lease, max(plan1.scratch_bytes, plan2.scratch_bytes))
        addresses = (args.src.address, out.address, scratch)
        local = memory.local(dt, args.op)
        if rank != straggler:
            yield from _transport.run(plan1, addresses, comm, dt, args.op, transport, deadline,
                                      local, None, seq.tag0)
        t_p1 = MPI.Wtime()
        first = yield from _transport.run(plan2, addresses, comm, dt, args.op, transport, deadline,
                                          local, None, seq.tag0)
    return t_p1, first
