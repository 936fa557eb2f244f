"""Compile one rank's slice of a schedule into a flat list of instructions.

A plan is an int64 array, one row per instruction, its columns named by ``COLUMNS``
(``rows[:, ROUND]``); offsets in bytes, counts in elements.  Buffers: IN (the caller's send buffer, or the receive buffer
when in place), OUT (the receive buffer), SCRATCH (incoming data to be reduced).

The executor posts the RECV and SEND rows of a round, completes them, then runs
the REDUCE (``buf2 = buf (op) buf2``) and COPY (``buf -> buf2``) rows.  It knows
nothing of the algorithm.

Transfers between one pair in one round that carry consecutive chunks form one
message; both ends derive the same messages from the schedule alone, so they match.
Reductions are computed as ``op(lower rank's data, higher rank's data)`` unless the
op is exactly commutative, so both ends of an exchange get bit-identical results.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

import numpy as np

from ..schedule import chunk_bounds

# The interpreter reads the row kinds and the columns at import (_interpreter.pyx).
RECV, SEND, REDUCE, COPY = 0, 1, 2, 3
COLUMNS = ("kind", "round", "peer", "buf", "offset", "count", "buf2", "offset2")
KIND, ROUND, PEER, BUF, OFFSET, COUNT, BUF2, OFFSET2 = range(len(COLUMNS))
IN, OUT, SCRATCH = 0, 1, 2


@dataclass(frozen=True)
class Plan:
    rows: np.ndarray      # (k, len(COLUMNS)) int64
    scratch_bytes: int
    max_requests: int


@dataclass
class _Round:
    index: int
    extent: int
    comm_rows: list
    local_rows: list
    scratch_used: int = 0

    def scratch(self, count):
        """Byte offset of a fresh scratch slot for ``count`` elements."""
        off = self.scratch_used
        self.scratch_used += count * self.extent
        return off


def compile_rounds(per_round, chunks, rank, count, extent, in_place, commutative, prepared=()):
    """Plan for ``rank`` from its transfers round by round (others' are ignored), so
    a rank's own slice (``schedule.rank_view``) compiles in time linear in its rounds;
    ``prepared`` lists the chunks that phase 1 left in OUT."""
    bounds = [(off * extent, n) for off, n in chunk_bounds(count, chunks)]
    where = [OUT if (in_place or c in prepared) else IN for c in range(chunks)]
    rounds = []
    for index, transfers in enumerate(per_round):
        rnd = _Round(index, extent, [], [])
        sent = _sends(rnd, transfers, rank, bounds, where)
        _recvs(rnd, transfers, rank, bounds, where, sent, commutative)
        rounds.append(rnd)
    rows = [row for rnd in rounds for row in rnd.comm_rows + rnd.local_rows]
    return Plan(
        rows=np.array(rows, dtype=np.int64).reshape(-1, len(COLUMNS)),
        scratch_bytes=max((r.scratch_used for r in rounds), default=0),
        max_requests=max((len(r.comm_rows) for r in rounds), default=0),
    )


def _messages(transfers, keep):
    """Runs of consecutive chunks per (src, dst): [(src, dst, reduce, [chunks])]."""
    mine = sorted((t.src, t.dst, t.reduce, t.chunk) for t in transfers if keep(t))
    out = []
    for (src, dst, red), group in groupby(mine, key=lambda x: x[:3]):
        chunks = [g[3] for g in group]
        run = [chunks[0]]
        for c in chunks[1:]:
            if c == run[-1] + 1:
                run.append(c)
            else:
                out.append((src, dst, red, run))
                run = [c]
        out.append((src, dst, red, run))
    return out


def _span(bounds, run):
    off = bounds[run[0]][0]
    return off, sum(bounds[c][1] for c in run)


def _sends(rnd, transfers, rank, bounds, where):
    sent = set()
    for _, dst, _, run in _messages(transfers, lambda t: t.src == rank):
        homes = {where[c] for c in run}
        if len(homes) != 1:
            raise ValueError(f"round {rnd.index}: chunks {run} to rank {dst} are not in one buffer")
        off, n = _span(bounds, run)
        if n:
            rnd.comm_rows.append((SEND, rnd.index, dst, homes.pop(), off, n, 0, 0))
        sent.update(run)
    return sent


def _recvs(rnd, transfers, rank, bounds, where, sent, commutative):
    for src, _, reduce, run in _messages(transfers, lambda t: t.dst == rank):
        off, n = _span(bounds, run)
        if n and reduce:
            _recv_reduce(rnd, src, rank, run, off, n, where, commutative)
        elif n:
            _recv_copy(rnd, src, run, off, n, where, sent)
        for c in run:
            where[c] = OUT


def _recv_copy(rnd, src, run, off, n, where, sent):
    if any(where[c] == OUT for c in run) and sent.intersection(run):
        # The OUT region is still being sent this round: land elsewhere first.
        s = rnd.scratch(n)
        rnd.comm_rows.append((RECV, rnd.index, src, SCRATCH, s, n, 0, 0))
        rnd.local_rows.append((COPY, rnd.index, src, SCRATCH, s, n, OUT, off))
    else:
        rnd.comm_rows.append((RECV, rnd.index, src, OUT, off, n, 0, 0))


def _recv_reduce(rnd, src, rank, run, off, n, where, commutative):
    local = where[run[0]]
    if commutative and local == IN:
        # OUT is free: land there and fold our own data in.
        rnd.comm_rows.append((RECV, rnd.index, src, OUT, off, n, 0, 0))
        rnd.local_rows.append((REDUCE, rnd.index, src, IN, off, n, OUT, off))
        return
    s = rnd.scratch(n)
    rnd.comm_rows.append((RECV, rnd.index, src, SCRATCH, s, n, 0, 0))
    if commutative or src < rank:
        if local == IN:
            rnd.local_rows.append((COPY, rnd.index, src, IN, off, n, OUT, off))
        rnd.local_rows.append((REDUCE, rnd.index, src, SCRATCH, s, n, OUT, off))
    else:
        rnd.local_rows.append((REDUCE, rnd.index, src, local, off, n, SCRATCH, s))
        rnd.local_rows.append((COPY, rnd.index, src, SCRATCH, s, n, OUT, off))
