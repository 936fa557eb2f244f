"""``algorithm="hierarchical"``: phase 1 inside and between nodes, then the round schedule.

Phase 1 runs on the early ranks while the straggler S is late
(schedule/hierarchical.py has the whole design):
- the early ranks of S's node ReduceScatter among themselves (a sub-communicator of
  the node without S), so that owner j holds its slice(s);
- every other node ReduceScatters inside itself (its node communicator); the ranks
  that hold chunk c on those nodes reduce it across them (a binomial tree, one crossing
  of the chunk per step) and the first sends the sum to the owner of c, which folds it in.
Then phase 2 is an ordinary plan: S scatters its slices inside its node and the
finished chunks are copied to the other nodes and inside them.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from mpi4py import MPI

from . import transport as _transport
from ..core import tags
from ..memory.buffers import region
from .plan import compile_plan
from ..schedule import chunk_bounds, verify
from ..schedule.hierarchical import hierarchical



def applies(topology, straggler) -> bool:
    """Whether the hierarchical schedule differs from flat StragglAR here."""
    return not topology.flat and len(topology.node(straggler)) > 1


@lru_cache(maxsize=32)
def _verified(nodes, straggler):
    return verify(hierarchical(nodes, straggler))


@lru_cache(maxsize=256)
def plan_for(nodes, straggler, rank, count, extent, in_place, commutative):
    schedule = _verified(nodes, straggler)
    prepared = frozenset(c for c, r in enumerate(schedule.owners) if r == rank)
    return schedule, compile_plan(schedule, rank, count, extent, in_place, commutative, prepared)


def holder(node, c, chunks):
    """The local rank of a node without S that holds chunk ``c`` after its ReduceScatter."""
    return node[c * len(node) // chunks]


def run(state, straggler, args, transport, deadline, wait, commutative):
    """Phase 1 (early ranks) and the plan; returns (end of phase 1, first receive)."""
    comm, out = state.private, args.out
    rank, topo = comm.Get_rank(), state.topology
    schedule, plan = plan_for(topo.nodes, straggler, rank, out.count, out.extent, args.in_place,
                              commutative)
    bounds = chunk_bounds(out.count, schedule.chunks)
    scratch_bytes = max(plan.scratch_bytes, _phase1_bytes(topo, schedule, rank, bounds, out.extent))
    scratch = state.scratch(scratch_bytes)
    if rank != straggler:
        if rank in topo.node(straggler):
            _owner(state, schedule, args, bounds, scratch, deadline, wait)
        else:
            _other_node(state, schedule, args, bounds, scratch, deadline, wait)
    t_p1 = MPI.Wtime()
    addresses = (args.src.address, out.address, MPI.buffer(scratch).address)
    first = _transport.execute(plan, addresses, comm, out.datatype, args.op, transport, deadline)
    return t_p1, first


def _mine(schedule, rank):
    return [c for c, r in enumerate(schedule.owners) if r == rank]


def _span(bounds, chunks):
    """(offset, count) in elements of consecutive ``chunks``."""
    if not chunks:
        return 0, 0
    return bounds[chunks[0]][0], sum(bounds[c][1] for c in chunks)


def _block(node, rank, chunks):
    """The chunks that ``rank`` of a node without S holds after the node's ReduceScatter."""
    return [c for c in range(chunks) if holder(node, c, chunks) == rank]


def _phase1_bytes(topo, schedule, rank, bounds, extent):
    if rank == schedule.straggler:
        return 0
    if rank in topo.node(schedule.straggler):
        count = _span(bounds, _mine(schedule, rank))[1]
        return 2 * count * extent      # the in-place landing, the other nodes' sum
    return 2 * _span(bounds, _block(topo.node(rank), rank, schedule.chunks))[1] * extent


def _owner(state, schedule, args, bounds, scratch, deadline, wait):
    """Early rank of S's node: ReduceScatter with its neighbours, fold in the other nodes."""
    comm, out, topo = state.private, args.out, state.topology
    rank, dt, extent = comm.Get_rank(), out.datatype, out.extent
    mine = _mine(schedule, rank)
    offset, count = _span(bounds, mine)
    nbytes = count * extent
    base = MPI.buffer(scratch).address
    reqs, pieces = [], []
    slot = nbytes
    for c in mine:      # each chunk comes reduced over the other nodes, from the first holder
        off, n = bounds[c]
        pieces.append((slot, off, n))
        src = holders_of(topo, schedule, c)[0]
        reqs.append(comm.Irecv(region(base + slot, n, dt, extent), src, tags.ACROSS))
        slot += n * extent
    sub = state.node_early_comm(schedule.straggler)
    counts = [_span(bounds, _mine(schedule, r))[1] for r in topo.node(schedule.straggler)
              if r != schedule.straggler]
    whole = region(args.src.address, out.count, dt, extent)
    land = region(base if args.in_place else out.address + offset * extent, count, dt, extent)
    reqs.append(sub.Ireduce_scatter(whole, land, counts, args.op))
    wait(reqs, deadline, "phase 1 (ReduceScatter in the straggler's node and the other nodes' slices)")
    if args.in_place:
        _bytes(out.address + offset * extent, nbytes)[:] = scratch[:nbytes]
    for slot, off, n in pieces:
        args.op.Reduce_local(region(base + slot, n, dt, extent), region(out.address + off * extent, n, dt, extent))


def _other_node(state, schedule, args, bounds, scratch, deadline, wait):
    """A node without S: ReduceScatter inside the node, reduce each chunk across the nodes
    without S (a binomial tree over the ranks that hold it), send the sum to its owner."""
    comm, out, topo = state.private, args.out, state.topology
    rank, dt, extent = comm.Get_rank(), out.datatype, out.extent
    node = topo.node(rank)
    counts = [_span(bounds, _block(node, r, schedule.chunks))[1] for r in node]
    block = _block(node, rank, schedule.chunks)
    first, count = _span(bounds, block)
    base = MPI.buffer(scratch).address
    whole = region(args.src.address, out.count, dt, extent)
    request = state.node_comm.Ireduce_scatter(whole, region(base, count, dt, extent), counts, args.op)
    wait([request], deadline, "phase 1 (ReduceScatter inside the node)")
    def piece(c, area=0):      # chunk c in the block (area 0) or in the landing area after it
        return region(base + area + (bounds[c][0] - first) * extent, bounds[c][1], dt, extent)

    done = set()
    for _, moves in _tree(topo, schedule, rank, block):
        reqs, folds = [], []
        for c, peer, receive in moves:
            if receive:
                reqs.append(comm.Irecv(piece(c, count * extent), peer, tags.ACROSS))
                folds.append(c)
            else:
                reqs.append(comm.Isend(piece(c), peer, tags.ACROSS))
                done.add(c)
        wait(reqs, deadline, "phase 1 (the node's slices across the other nodes)")
        for c in folds:
            args.op.Reduce_local(piece(c, count * extent), piece(c))
    reqs = [comm.Isend(piece(c), schedule.owners[c], tags.ACROSS) for c in block if c not in done]
    wait(reqs, deadline, "phase 1 (the nodes' slices to the straggler's node)")


def holders_of(topo, schedule, c):
    """The rank holding chunk ``c`` on each node without S, in node order."""
    home = topo.node(schedule.straggler)
    return [holder(node, c, schedule.chunks) for node in topo.nodes if node != home]


def _tree(topo, schedule, rank, block):
    """[(step, [(chunk, peer, receive?)])]: binomial reductions of each chunk over the
    ranks that hold it on the nodes without S; the first of them sends it to the owner."""
    steps = {}
    for c in block:
        holders = holders_of(topo, schedule, c)
        me = holders.index(rank)
        d = 1
        while d < len(holders):
            if me % (2 * d) == d:
                steps.setdefault(d, []).append((c, holders[me - d], False))
                break
            if me + d < len(holders):
                steps.setdefault(d, []).append((c, holders[me + d], True))
            d *= 2
    return sorted(steps.items())


def _bytes(address, nbytes):
    return np.frombuffer(MPI.buffer.fromaddress(address, nbytes), np.uint8)
