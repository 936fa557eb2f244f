"""Hierarchical StragglAR: both phases as schedules for ranks grouped in nodes.

``nodes`` lists the ranks of each node (any layout: block, cyclic, unequal sizes).
The straggler S sits on node A of K ranks, whose other ranks e_0 .. e_{K-2} (local
order) are the *owners*.  Lane j is local rank j of every node (j mod the node's size
on a smaller node).  The buffer is cut into K-1 slices, one per owner, each slice into
``pieces`` pieces and each piece into K equal chunks (sub-chunks): chunk
(i*pieces + w)*K + x is sub-chunk x of piece w of slice i, owned by e_i (each owner's
chunks contiguous, in local order).

Across nodes every lane runs the same node-level broadcast, ``spread(m, pieces)``:
in round t node u sends to node u + 2^(t mod d) (mod m, d = ceil(log2 m)) the newest
piece that node lacks (a node whose partner lacks nothing tries its other
power-of-two neighbours), and node A has piece w from round w.  Each node sends and
receives at most one piece per round on each lane, every node receives each piece
once, and all pieces arrive in ``pieces + d - 1`` rounds for powers of two (a few
more otherwise): the per-NIC traffic stays one slice's worth, and the pipeline fill
is ceil(log2 m) rounds where a chain would take m - 1.

Phase 2 (after S arrives; ``hierarchical``), piece by piece, each stage one round
behind the one before it:
- round w: S sends its raw piece w of every slice to the slice's owner, which reduces;
- round w+1: each owner copies its finished piece w to every other rank of A (S too);
- from round w+2 the round's K-1 pieces cross on all K lanes (S's NIC too): lane j
  carries sub-chunks j(K-1) .. j(K-1)+K-2 of them, in slice order (``lane_blocks``);
- on every other node the lane rank that receives a piece forwards it as ``spread``
  says and copies it to the other ranks of its node one round after it arrived.
The owners' reductions of S's raw data are the only ones, each computed at one place
(partial (+) raw) and then copied: every rank ends with the same bits.

Phase 1 (while S is late; ``phase1``, algorithm "reduce_to_owners"), the same
chunks reduced toward their owners, pipelined the same way on the owners' K-1 lanes
(S is absent): on each node the ranks send their raw piece w of every slice to its
lane rank one round apart (offset o in round w + o - 1); the lane ranks of the nodes
reduce it along the lane by ``spread`` run backwards (a node sends each piece once,
after its children's partials are in); inside A the other owners send theirs to the
owner the same way.  Nothing involves S.  Afterwards e_i holds its chunks reduced
over every rank but S, in an order fixed by (nodes, straggler, pieces).

``hring`` is the synchronous hierarchical ring as a schedule: ReduceScatter inside
each node (rank j + o sends its lane block j to lane rank j in step o), a ring
ReduceScatter and AllGather across nodes on every lane, an AllGather inside.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .model import Schedule, ScheduleError, Transfer, gc_paused
from .algorithms import HIERARCHICAL, HRING, REDUCE_TO_OWNERS

__all__ = ["hierarchical", "phase1", "hring", "owners_of", "pieces_for", "rounds_of", "spread",
           "rank_rounds"]

@functools.lru_cache(maxsize=64)
def spread(m: int, pieces: int) -> tuple:
    """Node-level broadcast of ``pieces`` pieces from node 0 to nodes 1 .. m-1:
    ((round, src, dst, piece), ...).  Node 0 may send piece w from round w on."""
    if m < 2:
        return ()
    d = (m - 1).bit_length()
    full = (1 << pieces) - 1
    have, out, t, missing = [0] * m, [], 0, m
    while True:
        if t < pieces:
            have[0] |= 1 << t
            missing -= have[0] == full
        if not missing:
            return tuple(out)
        sends = _round_of_spread(have, t, m, d)
        for _, _, v, w in sends:
            have[v] |= 1 << w
            missing -= have[v] == full
        out += sends
        t += 1
        if t > 2 * pieces + 4 * d + 8:   # never seen; the verifier would catch a wrong one anyway
            raise ScheduleError(f"spread({m}, {pieces}) does not finish")


def _round_of_spread(have: list, t: int, m: int, d: int) -> list:
    """Round t: u sends to u + 2^(t mod d) the newest piece it lacks; a node whose
    partner lacks nothing tries u + 2^j (j = 0 .. d-1) for one that receives nothing
    yet (for m not a power of two the shifts overlap and leave such nodes idle)."""
    step, sends, taken, idle = 1 << (t % d), [], set(), []
    for u in range(m):
        v = u + step - m if u + step >= m else u + step
        lack = have[u] & ~have[v]
        if lack:
            sends.append((t, u, v, lack.bit_length() - 1))
            taken.add(v)
        elif have[u]:
            idle.append(u)
    for u in idle:
        for j in range(d):
            v = (u + (1 << j)) % m
            lack = have[u] & ~have[v] if v not in taken else 0
            if lack:
                sends.append((t, u, v, lack.bit_length() - 1))
                taken.add(v)
                break
    return sends


@functools.lru_cache(maxsize=64)
def spread_rounds(m: int, pieces: int) -> int:
    """Rounds of ``spread`` (0 for one node)."""
    moves = spread(m, pieces)
    return moves[-1][0] + 1 if moves else 0


@functools.lru_cache(maxsize=64)
def _arrivals(m: int, pieces: int) -> tuple:
    """arrive[v][w]: the round of ``spread`` in which node v receives piece w."""
    arrive = [[0] * pieces for _ in range(m)]
    for t, _, v, w in spread(m, pieces):
        arrive[v][w] = t
    return tuple(map(tuple, arrive))


def _arrivals_at(m: int, pieces: int, node: int) -> dict:
    """{node: arrive[node]} without the table of every node (a rank's own view)."""
    arrive = [0] * pieces
    for t, _, v, w in spread(m, pieces):
        if v == node:
            arrive[w] = t
    return {node: arrive}


def pieces_for(m: int) -> int:
    """Pieces per slice when the buffer's size is not known: 1 for two nodes, else
    ceil(log2 m) (the runtime's when it knows no links).  For a size and links the model
    chooses: ``tiers.pieces``."""
    return 1 if m <= 2 else (m - 1).bit_length()


@dataclass(frozen=True, eq=True)
class _Layout:
    nodes: tuple          # A first, then the others in their order
    straggler: int
    early: tuple          # the owners e_i, local order
    lanes: tuple          # local index of e_i on A
    pieces: int

    @property
    def sub(self) -> int:
        """Sub-chunks per piece: A's size, so that k lanes carry k-1 pieces a round."""
        return len(self.nodes[0])

    @property
    def chunks(self) -> int:
        return len(self.early) * self.pieces * self.sub

    def piece(self, i: int, w: int) -> range:
        """The chunks of piece w of slice i."""
        base = (i * self.pieces + w) * self.sub
        return range(base, base + self.sub)

    def lane_rank(self, v: int, i: int) -> int:
        """Phase 1: the rank of node v on owner e_i's lane."""
        node = self.nodes[v]
        return node[self.lanes[i] % len(node)]

    def owners(self) -> tuple:
        return tuple(e for e in self.early for _ in range(self.pieces * self.sub))

    @functools.cached_property
    def lane_blocks(self) -> tuple:
        """Phase 2: lane j (local rank j of A, S's too) carries, of every round's k-1
        pieces (k(k-1) sub-chunks in slice order), the sub-chunks j(k-1) .. j(k-1)+k-2:
        (slice, sub-chunk) pairs, at most two runs of consecutive chunks."""
        k = self.sub
        return tuple(tuple(divmod(z, k) for z in range(j * (k - 1), (j + 1) * (k - 1)))
                     for j in range(k))


@functools.lru_cache(maxsize=64)
def _layout(nodes, straggler, pieces) -> _Layout:
    n = sum(len(node) for node in nodes)
    if sorted(r for node in nodes for r in node) != list(range(n)) or not all(nodes):
        raise ScheduleError(f"nodes must partition ranks 0..{n - 1} into non-empty groups, got {nodes}")
    home = next((i for i, node in enumerate(nodes) if straggler in node), None)
    if home is None:
        raise ScheduleError(f"straggler must be in 0..{n - 1}, got {straggler}")
    if len(nodes[home]) < 2:
        raise ScheduleError("hierarchical needs a second rank on the straggler's node")
    if not isinstance(pieces, int) or pieces < 1:
        raise ScheduleError(f"pieces must be an int >= 1, got {pieces!r}")
    a = nodes[home]
    early = tuple(r for r in a if r != straggler)
    order = (a,) + nodes[:home] + nodes[home + 1:]
    return _Layout(order, straggler, early, tuple(a.index(e) for e in early), pieces)


def _normal(nodes, straggler, pieces):
    nodes = tuple(tuple(int(r) for r in node) for node in nodes)
    m = len(nodes)
    return _layout(nodes, int(straggler), pieces_for(m) if pieces is None else int(pieces))


def owners_of(nodes, straggler: int, pieces: int | None = None) -> tuple:
    """The owner of each chunk: the chunks of slice i belong to e_i."""
    return _normal(nodes, straggler, pieces).owners()


def rounds_of(nodes: int, pieces: int | None = None) -> int:
    """Phase-2 rounds for ``nodes`` nodes: the scatter, A's share, ``spread``, the last share."""
    pieces = pieces_for(nodes) if pieces is None else pieces
    return max(pieces + 1, 2 + spread_rounds(nodes, pieces) + 1)


# ---- phase 2 ------------------------------------------------------------------------------

def hierarchical(nodes, straggler: int, pieces: int | None = None) -> Schedule:
    """The phase-2 schedule for ``nodes`` (tuples of ranks, local order), ``straggler`` late."""
    return _phase2(_normal(nodes, straggler, pieces))


@functools.lru_cache(maxsize=32)
def _phase2(lay: _Layout) -> Schedule:
    n = sum(map(len, lay.nodes))
    with gc_paused():
        rounds = _collect(_phase2_moves(lay, None), rounds_of(len(lay.nodes), lay.pieces))
    return Schedule(HIERARCHICAL, n, lay.straggler, lay.chunks, rounds, lay.owners())


def rank_rounds(nodes, straggler: int, rank: int, pieces: int | None = None, phase: int = 2):
    """(chunks, rounds): ``rank``'s own transfers of a phase, round by round, built without
    the whole schedule (time linear in the rank's transfers, plus ``spread`` once)."""
    lay = _normal(nodes, straggler, pieces)
    if phase == 2:
        moves, total = _phase2_moves(lay, rank), rounds_of(len(lay.nodes), lay.pieces)
    else:
        moves, total = _phase1_moves(lay, rank), _phase1_rounds(lay)
    with gc_paused():
        return lay.chunks, _collect(moves, total)


def _collect(moves, total: int = 0) -> list:
    """Rounds 0 .. max(total, last round + 1) - 1 from (round, src, dst, chunk, reduce)
    tuples; a rank's own view keeps its empty rounds, as round numbers are tags."""
    by_round: dict[int, list] = {}
    for r, src, dst, chunk, reduce in moves:
        by_round.setdefault(r, []).append(Transfer(src, dst, chunk, reduce))
    total = max([total] + [r + 1 for r in by_round])
    return [tuple(by_round.get(r, ())) for r in range(total)]


def _phase2_moves(lay: _Layout, rank):
    """Every transfer of phase 2 (or those of ``rank``) as (round, src, dst, chunk, reduce)."""
    W, S, a = lay.pieces, lay.straggler, lay.nodes[0]
    mine = lambda *ranks: rank is None or rank in ranks  # noqa: E731
    for i, e in enumerate(lay.early):
        for w in range(W):
            piece = lay.piece(i, w)
            if mine(S, e):
                yield from ((w, S, e, c, True) for c in piece)
            for r in a:
                if r != e and mine(e, r):
                    yield from ((w + 1, e, r, c, False) for c in piece)
    m = len(lay.nodes)
    arrive = _arrivals(m, W) if rank is None else _arrivals_at(m, W, _node(lay, rank))
    yield from _across(lay, rank, arrive)


def _across(lay: _Layout, rank, arrive):
    """The lanes' broadcast across nodes (a round after A's share: every rank of A then
    holds the round's pieces), and each node's share of what arrived."""
    W, m, k = lay.pieces, len(lay.nodes), lay.sub
    at = lambda v, j: lay.nodes[v][j % len(lay.nodes[v])]  # noqa: E731
    chunks = lambda j, w: [(i * W + w) * k + x for i, x in lay.lane_blocks[j]]  # noqa: E731
    for t, u, v, w in _spread_of(m, W, lay, rank):
        for j in range(k):
            src, dst = at(u, j), at(v, j)
            if rank is None or rank in (src, dst):
                yield from ((t + 2, src, dst, c, False) for c in chunks(j, w))
    for v in range(1, m) if rank is None else _node_index(lay, rank):
        for j in range(k):
            src = at(v, j)
            for r in lay.nodes[v]:
                if r != src and (rank is None or rank in (src, r)):
                    for w in range(W):
                        yield from ((arrive[v][w] + 3, src, r, c, False) for c in chunks(j, w))


def _node(lay: _Layout, rank) -> int:
    return next(i for i, node in enumerate(lay.nodes) if rank in node)


def _node_index(lay: _Layout, rank) -> list:
    v = _node(lay, rank)
    return [v] if v else []


def _spread_of(m, W, lay, rank):
    """The node-level moves that ``rank``'s node takes part in (all for ``rank=None``)."""
    if rank is None:
        return spread(m, W)
    v = _node(lay, rank)
    return [move for move in spread(m, W) if move[1] == v or move[2] == v]


# ---- phase 1 ------------------------------------------------------------------------------

def phase1(nodes, straggler: int, pieces: int | None = None) -> Schedule:
    """The phase-1 schedule ("reduce_to_owners"): afterwards owners[c] holds chunk c
    reduced over every rank but the straggler, which takes no part."""
    return _phase1(_normal(nodes, straggler, pieces))


@functools.lru_cache(maxsize=32)
def _phase1(lay: _Layout) -> Schedule:
    n = sum(map(len, lay.nodes))
    with gc_paused():
        rounds = _collect(_phase1_moves(lay, None), _phase1_rounds(lay))
    return Schedule(REDUCE_TO_OWNERS, n, lay.straggler, lay.chunks, rounds, lay.owners())


def _contributors(lay: _Layout, v: int, i: int) -> tuple:
    """The ranks that send their raw chunks of slice i to its lane rank on node v, in the
    order of the rounds they send in (node A: the other owners)."""
    if v == 0:
        early = lay.early
        return tuple(early[(i + o) % len(early)] for o in range(1, len(early)))
    node = lay.nodes[v]
    local = lay.lanes[i] % len(node)
    return tuple(node[(local + o) % len(node)] for o in range(1, len(node)))


def _phase1_moves(lay: _Layout, rank):
    """Every transfer of phase 1 (or those of ``rank``) as (round, src, dst, chunk, reduce)."""
    W, m = lay.pieces, len(lay.nodes)
    nodes = range(m) if rank is None else [next(i for i, nd in enumerate(lay.nodes) if rank in nd)]
    for v in nodes:
        for i in range(len(lay.early)):
            dst = lay.lane_rank(v, i) if v else lay.early[i]
            for o, src in enumerate(_contributors(lay, v, i), 1):
                if rank is None or rank in (src, dst):
                    for w in range(W):
                        yield from ((w + o - 1, src, dst, c, True) for c in lay.piece(i, w))
    offset, last = _phase1_offset(lay)
    for t, u, v, w in _spread_of(m, W, lay, rank):
        for i in range(len(lay.early)):
            # spread backwards: piece W-1-w goes from v up to u, adding v's partial
            src, dst = lay.lane_rank(v, i), lay.lane_rank(u, i)
            if rank is None or rank in (src, dst):
                yield from ((offset + last - t, src, dst, c, True) for c in lay.piece(i, W - 1 - w))


def _phase1_rounds(lay: _Layout) -> int:
    """Rounds of phase 1: the staggered ReduceScatters, and the reversed spread after them."""
    offset, last = _phase1_offset(lay)
    most = max(len(lay.early) - 1, max(len(node) - 1 for node in lay.nodes[1:]) if len(lay.nodes) > 1 else 0)
    inside = lay.pieces + most - 1 if most else 0
    return max(inside, offset + last + 1 if len(lay.nodes) > 1 else 0)


def _phase1_offset(lay: _Layout) -> tuple:
    """(offset, last spread round): the reversed spread starts late enough that every
    lane rank has all of its node's contributions of a piece before it moves it."""
    m, W = len(lay.nodes), lay.pieces
    sizes = tuple(len(lay.early) - 1 if v == 0 else len(lay.nodes[v]) - 1 for v in range(m))
    return _offset(m, W, sizes)


@functools.lru_cache(maxsize=64)
def _offset(m, W, contributors):
    moves = spread(m, W)
    last = moves[-1][0] if moves else 0
    worst = None
    for t, u, v, w in moves:
        c = contributors[u] if contributors[u] > contributors[v] else contributors[v]
        late = c + t - w
        if worst is None or late > worst:
            worst = late
    # move (t, w) runs backwards in round offset + last - t, carrying piece p = W-1-w,
    # which its ends hold from round p + c on
    return (max(0, worst + W - 1 - last) if moves else 0), last


# ---- the hierarchical ring ----------------------------------------------------------------

def hring(nodes) -> Schedule:
    """The synchronous hierarchical ring for ``nodes`` (any layout, unequal sizes: the
    lanes are the local ranks below the smallest node's size)."""
    nodes = tuple(tuple(int(r) for r in node) for node in nodes)
    return _hring(nodes)


@functools.lru_cache(maxsize=16)
def _hring(nodes) -> Schedule:
    n = sum(len(node) for node in nodes)
    if sorted(r for node in nodes for r in node) != list(range(n)) or not all(nodes):
        raise ScheduleError(f"nodes must partition ranks 0..{n - 1} into non-empty groups, got {nodes}")
    with gc_paused():
        moves = list(_hring_moves(nodes))
        rounds = _collect(moves)
    lanes, m = min(map(len, nodes)), len(nodes)
    return Schedule(HRING, n, None, lanes * m, rounds)


def _hring_moves(nodes):
    lanes, m, inside = min(map(len, nodes)), len(nodes), max(map(len, nodes)) - 1
    block = lambda j: range(j * m, (j + 1) * m)  # noqa: E731
    for node in nodes:                 # ReduceScatter inside: lane block j to local rank j
        for j in range(lanes):
            for o in range(1, len(node)):
                for c in block(j):
                    yield o - 1, node[(j + o) % len(node)], node[j], c, True
    for j in range(lanes):             # a ring per lane across the nodes
        for t in range(m - 1):
            for p in range(m):
                src, dst = nodes[p][j], nodes[(p + 1) % m][j]
                yield inside + t, src, dst, j * m + (p - t) % m, True
                yield inside + m - 1 + t, src, dst, j * m + (p + 1 - t) % m, False
    start = inside + 2 * (m - 1)
    for node in nodes:                 # AllGather inside
        for j in range(lanes):
            for o in range(1, len(node)):
                for c in block(j):
                    yield start + o - 1, node[j], node[(j + o) % len(node)], c, False
