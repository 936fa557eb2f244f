"""Hierarchical StragglAR: a phase-2 schedule for ranks grouped in nodes.

``nodes`` lists the ranks of each node (any layout: block, cyclic, unequal sizes).
The straggler S sits on node A with ``k`` ranks; the buffer is cut into ``k`` slices
(chunks), one per local rank of A.

Phase 1 (during the delay, PHASE1 "reduce_to_owners"): every node but A reduces its
slices inside the node and sends them across to A, whose early ranks ReduceScatter
among themselves and fold the other nodes' slices in.  Chunk j is then held by its
owner, local rank j of A, reduced over every rank but S; S's own slice goes to a
helper beside it (local rank j_S - 1, or 1 when j_S = 0), so that each owner's
chunks are contiguous.

Phase 2 (after S arrives).  A round is one step of every rank's plan: a rank posts
all its messages of the round at once (several peers: MULTI_PORT in verify.py) and
moves on when they are done, so a rank that is served early goes on early.
- Round 0: S sends its raw slice j to owner j, which reduces, and swaps its own slice
  with the helper (both reduce).  These are the only reductions, each computed at one
  place or at both ends from the same operands: every rank ends with the same bits.
- Round 1: every owner (S for its own slice) sends its finished chunk to the other
  ranks of A and, on the slice's lane (local rank j mod node size), to the first node
  without the straggler.  Later rounds double the nodes that hold the chunks (a
  binomial tree over nodes); across more than two nodes each slice travels in
  ``pieces_for(m)`` pieces, piece q one round after piece q-1 (a pipeline).
- Once a node has a piece, its lane rank sends it to the node's other ranks.
Only finished chunks cross between nodes after the arrival, one way, and each node
receives the buffer once: for two nodes the step between them is one one-way transfer.
"""
from __future__ import annotations

import functools

from .model import Schedule, ScheduleError, Transfer, gc_paused

__all__ = ["hierarchical", "owners_of", "helper_of", "pieces_for", "rounds_of"]


def helper_of(local: int) -> int:
    """The local rank that holds the straggler's slice after phase 1."""
    return local - 1 if local > 0 else 1


def pieces_for(nodes: int) -> int:
    """Pieces per slice: one for two nodes; across more, the doubling is pipelined in
    ceil(log2 nodes) pieces, so that a lane forwards one piece while the next arrives."""
    return 1 if nodes <= 2 else (nodes - 1).bit_length()


def owners_of(node: tuple, straggler: int, pieces: int = 1) -> tuple:
    """The owner of each chunk of the straggler's ``node``: slice j (chunks
    j*pieces .. j*pieces+pieces-1) belongs to local rank j, S's slice to the helper."""
    helper = node[helper_of(node.index(straggler))]
    return tuple(helper if r == straggler else r for r in node for _ in range(pieces))


def rounds_of(nodes: int) -> int:
    """Phase-2 rounds for ``nodes`` nodes: the scatter, ceil(log2 nodes) crossings (the
    pieces after the first one more each), the share."""
    return 1 + pieces_for(nodes) - 1 + max(1, (nodes - 1).bit_length()) + 1


def hierarchical(nodes, straggler: int) -> Schedule:
    """The schedule for ``nodes`` (tuples of ranks, local order) with ``straggler`` late."""
    nodes = tuple(tuple(int(r) for r in node) for node in nodes)
    return _cached(nodes, int(straggler))


@functools.lru_cache(maxsize=32)
def _cached(nodes, straggler):
    n = sum(len(node) for node in nodes)
    if sorted(r for node in nodes for r in node) != list(range(n)) or not all(nodes):
        raise ScheduleError(f"nodes must partition ranks 0..{n - 1} into non-empty groups, got {nodes}")
    home = next((i for i, node in enumerate(nodes) if straggler in node), None)
    if home is None:
        raise ScheduleError(f"straggler must be in 0..{n - 1}, got {straggler}")
    if len(nodes[home]) < 2:
        raise ScheduleError("hierarchical needs a second rank on the straggler's node")
    pieces = pieces_for(len(nodes))
    with gc_paused():
        owners = owners_of(nodes[home], straggler, pieces)
        rounds = [_scatter(nodes[home], straggler, owners, pieces)]
        rounds += _spread(nodes, home, straggler, owners, pieces)
    return Schedule("hierarchical", n, straggler, len(owners), [r for r in rounds if r], owners)


def _scatter(node, straggler, owners, pieces):
    """S's raw slices to their owners, and S's own slice swapped with the helper."""
    mine = node.index(straggler)
    own = range(mine * pieces, (mine + 1) * pieces)
    return tuple([Transfer(straggler, owners[c], c, True) for c in range(len(owners))]
                 + [Transfer(owners[c], straggler, c, True) for c in own])


def _spread(nodes, home, straggler, owners, pieces):
    """Copies of finished chunks: inside A at once; across nodes by doubling, piece q of
    every slice one round after piece q-1; inside every other node once it has arrived."""
    chunks, mine = len(owners), nodes[home].index(straggler)
    order = [home] + [i for i in range(len(nodes)) if i != home]
    # After the swap S holds its own slice finished too: it sends that one, so that the
    # helper sends no more than the others.
    holder = {(home, c): straggler if c // pieces == mine else owners[c] for c in range(chunks)}
    rounds = {0: [Transfer(holder[(home, c)], r, c) for c in range(chunks) for r in nodes[home]
                  if r not in (owners[c], holder[(home, c)])]}
    hop, span = 0, 1
    while span < len(order):
        for i in range(min(span, len(order) - span)):
            dst_node = nodes[order[i + span]]
            for c in range(chunks):
                dst = dst_node[(c // pieces) % len(dst_node)]
                rounds.setdefault(hop + c % pieces, []).append(Transfer(holder[(order[i], c)], dst, c))
                holder[(order[i + span], c)] = dst
                arrived = hop + c % pieces
                rounds.setdefault(arrived + 1, []).extend(
                    Transfer(dst, r, c) for r in dst_node if r != dst)
        hop, span = hop + 1, span * 2
    return [tuple(rounds.get(t, ())) for t in range(max(rounds) + 1)]
