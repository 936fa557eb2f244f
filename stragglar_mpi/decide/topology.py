"""Which ranks share a node, and how fast the links inside and between nodes are.

Nodes come from ``Split_type(COMM_TYPE_SHARED)`` on the library's private
communicator, so any layout works (block, cyclic, unequal node sizes).  Both are
found once per communicator, when its state is set up (every rank takes part).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..core import tags
from ..core.exchange import wait



@dataclass(frozen=True)
class Topology:
    nodes: tuple        # the ranks of each node in local order; nodes ordered by their lowest rank
    node_of: tuple      # node index of every rank

    @property
    def flat(self) -> bool:
        """One node, or one rank per node: nothing is hierarchical."""
        return len(self.nodes) == 1 or len(self.nodes) == len(self.node_of)

    def node(self, rank) -> tuple:
        return self.nodes[self.node_of[rank]]

    def local(self, rank) -> int:
        return self.node(rank).index(rank)


@dataclass(frozen=True)
class Links:
    """Latency (s) and bandwidth (bytes/s) inside a node and between nodes."""
    alpha_intra: float
    bandwidth_intra: float
    alpha_inter: float
    bandwidth_inter: float


def discover(comm):
    """(Topology, node communicator) of ``comm``; collective."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    members = MPI.Group.Translate_ranks(node.Get_group(), None, comm.Get_group())
    mine = np.array([min(members)], np.int64)
    leaders = np.empty(comm.Get_size(), np.int64)
    wait([comm.Iallgather(mine, leaders)])
    firsts = sorted(set(leaders.tolist()))
    node_of = tuple(firsts.index(int(v)) for v in leaders)
    nodes = tuple(tuple(r for r in range(len(node_of)) if node_of[r] == i) for i in range(len(firsts)))
    return Topology(nodes, node_of), node


def measure(comm, topology, small=8, large=1 << 20, reps=3):
    """Links measured by ping-pong: local ranks 0 and 1 of the first node that has two,
    and the first ranks of nodes 0 and 1.  The figures are shared by an allreduce,
    so every rank holds the same ones.  Collective."""
    rank = comm.Get_rank()
    figures = np.zeros(4)
    pairs = [(0, _intra_pair(topology)), (2, _inter_pair(topology))]
    for slot, pair in pairs:
        if pair is not None and rank in pair:
            peer = pair[1] if rank == pair[0] else pair[0]
            figures[slot:slot + 2] = _pingpong(comm, peer, rank == pair[0], small, large, reps)
        comm.Barrier()
    shared = np.empty(4)
    wait([comm.Iallreduce(figures, shared, MPI.MAX)])
    a1, b1, a2, b2 = shared.tolist()
    if not b1:
        a1, b1 = a2, b2
    if not b2:
        a2, b2 = a1, b1
    return Links(a1, b1, a2, b2)


def _intra_pair(topology):
    node = next((nd for nd in topology.nodes if len(nd) > 1), None)
    return None if node is None else (node[0], node[1])


def _inter_pair(topology):
    return None if len(topology.nodes) < 2 else (topology.nodes[0][0], topology.nodes[1][0])


def _pingpong(comm, peer, first, small, large, reps):
    """(alpha s, bandwidth B/s) from the best of ``reps`` round trips at two sizes."""
    times = []
    for nbytes in (small, large):
        buf = np.zeros(nbytes, np.uint8)
        best = float("inf")
        for _ in range(reps + 1):      # the first round trip warms up the path
            t0 = MPI.Wtime()
            if first:
                wait([comm.Isend(buf, peer, tags.PING)])
                wait([comm.Irecv(buf, peer, tags.PING)])
            else:
                wait([comm.Irecv(buf, peer, tags.PING)])
                wait([comm.Isend(buf, peer, tags.PING)])
            best = min(best, (MPI.Wtime() - t0) / 2)
        times.append(best)
    alpha = times[0]
    return alpha, (large - small) / max(times[1] - alpha, 1e-9)
