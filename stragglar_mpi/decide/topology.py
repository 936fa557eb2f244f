"""Which ranks share a node, and how fast the links inside and between nodes are.

Nodes come from ``Split_type(COMM_TYPE_SHARED)`` on the library's private
communicator, so any layout works (block, cyclic, unequal node sizes).  Both are
found once per communicator, when its state is set up (every rank takes part).
"""
from __future__ import annotations

from functools import lru_cache

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..core import tags
from ..core.exchange import wait
from ..schedule import tiers as _tiers
from ..schedule.units import MiB


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


def shape(tiers):
    """The two-tier model's arguments (schedule/tiers.py) for the library's ``tiers``
    ((topology, links)): (nodes, ranks of the largest node, ranks of the smallest: the
    lanes every node has, (a1, b1, a2, b2))."""
    topology, links = tiers
    sizes = [len(node) for node in topology.nodes]
    return len(sizes), max(sizes), min(sizes), (links.alpha_intra, links.bandwidth_intra,
                                                links.alpha_inter, links.bandwidth_inter)


@lru_cache(maxsize=256)
def costs(nbytes, tiers, n, alpha, bandwidth) -> dict:
    """name -> schedule/tiers.Cost of ``nbytes``: on ``tiers`` when the communicator spans
    nodes, else on one tier of ``n`` ranks (``alpha`` s, ``bandwidth`` B/s).  How auto,
    the report and the benchmark price a communicator.  Cached (auto prices every call):
    the dict is shared, never changed."""
    if tiers is None:
        return _tiers.flat(n, nbytes, alpha, bandwidth)
    m, k, lanes, figures = shape(tiers)
    return _tiers.costs(m, k, nbytes, *figures, lanes)


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


#: The setup's link measurement: message sizes of the latency and bandwidth ping-pongs,
#: the bytes every lane moves at once between nodes, and the repetitions (medians).
_SMALL, _LARGE, _LANE_BYTES, _REPS = 8, MiB, 2 * MiB, 3


def measure(comm, topology):
    """Links measured by ping-pong: local ranks 0 and 1 of the first node that has two
    (inside a node), and between nodes 0 and 1 every lane at once (local rank j of
    one with local rank j of the other, ``_LANE_BYTES`` each): a node's ranks share its
    link(s) to the others, as hring's and hierarchical's lanes do, so the figure is a
    lane's bandwidth while every lane is busy: with one NIC per node, the link's rate
    over the lanes; with one NIC per rank, a NIC's (a link's burst, e.g. a token
    bucket's, is a small part of ``_LANE_BYTES`` times the lanes).  The latency between nodes
    is one pair's.  The figures are shared by an allreduce, so every rank holds the same ones.
    Collective."""
    rank = comm.Get_rank()
    figures = np.zeros(3)
    intra = _intra_pair(topology)
    if intra is not None and rank in intra:
        figures[0:2] = _pingpong(comm, _other(intra, rank), rank == intra[0], _SMALL, _LARGE, _REPS)
    comm.Barrier()
    lanes = _lanes(topology)
    if lanes and rank in lanes[0]:
        figures[2] = _best_trip(comm, _other(lanes[0], rank), rank == lanes[0][0], _SMALL, _REPS)
    trips = _bulk(comm, lanes, _LANE_BYTES, _REPS) if lanes else np.zeros(0)
    shared = np.empty(3 + len(trips))
    wait([comm.Iallreduce(np.concatenate([figures, trips]), shared, MPI.MAX)])
    a1, b1, a2 = shared[:3].tolist()
    if lanes:       # the slowest rank's times, their median; the first one warms the path
        b2 = _LANE_BYTES / max(float(np.median(shared[4:])) - a2, 1e-9)
    else:
        a2, b2 = a1, b1
    if not b1:
        a1, b1 = a2, b2
    return Links(a1, b1, a2, b2)


def _other(pair, rank):
    return pair[1] if rank == pair[0] else pair[0]


def _intra_pair(topology):
    node = next((nd for nd in topology.nodes if len(nd) > 1), None)
    return None if node is None else (node[0], node[1])


def _lanes(topology):
    """Between nodes 0 and 1: (local rank j of node 0, local rank j of node 1) for each lane."""
    if len(topology.nodes) < 2:
        return ()
    return tuple(zip(topology.nodes[0], topology.nodes[1]))


def _bulk(comm, lanes, nbytes, reps):
    """Seconds for every lane at once to move ``nbytes`` from node 0 to node 1, each time
    between two Barriers of every rank (one way: a lane that finished early must not
    send its answer while the others still send), ``reps + 1`` times.  Collective."""
    rank = comm.Get_rank()
    pair = next((p for p in lanes if rank in p), None)
    buf = np.zeros(nbytes if pair else 0, np.uint8)
    trips = np.zeros(reps + 1)
    for i in range(reps + 1):
        comm.Barrier()
        t0 = MPI.Wtime()
        if pair is not None:
            call = comm.Isend if rank == pair[0] else comm.Irecv
            wait([call(buf, _other(pair, rank), tags.PING)])
        comm.Barrier()
        trips[i] = MPI.Wtime() - t0
    return trips


def _trip(comm, peer, first, buf):
    """One round trip of ``buf`` with ``peer`` (``first`` sends first): half its seconds."""
    t0 = MPI.Wtime()
    if first:
        wait([comm.Isend(buf, peer, tags.PING)])
        wait([comm.Irecv(buf, peer, tags.PING)])
    else:
        wait([comm.Irecv(buf, peer, tags.PING)])
        wait([comm.Isend(buf, peer, tags.PING)])
    return (MPI.Wtime() - t0) / 2


def _best_trip(comm, peer, first, nbytes, reps):
    """The best half round trip of ``nbytes`` over ``reps`` (after one to warm the path)."""
    buf = np.zeros(nbytes, np.uint8)
    return min(_trip(comm, peer, first, buf) for _ in range(reps + 1))


def _pingpong(comm, peer, first, small, large, reps):
    """(alpha s, bandwidth B/s) from the best of ``reps`` round trips at two sizes."""
    alpha = _best_trip(comm, peer, first, small, reps)
    bulk = _best_trip(comm, peer, first, large, reps)
    return alpha, (large - small) / max(bulk - alpha, bulk / 2)   # a noisy alpha is no bandwidth
