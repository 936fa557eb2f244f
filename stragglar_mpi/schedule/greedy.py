"""StragglAR copies for large n: the round-by-round greedy of ``augmenting.py`` on NumPy.

Same rules as ``augmenting._greedy_round`` (newest chunks first; receivers whose
unfinished chunks will not need them as senders next round; senders holding few
unfinished chunks), without the augmenting paths: they cost about n^3 and buy at
most a round.  Rounds are produced one at a time as (src, dst, chunk) columns, so a
caller can verify them or keep one rank's part without holding the whole schedule.

State is one boolean chunk x rank matrix (n^2 bytes: 16 MiB at n=4096).  A round
costs a few vector operations per unfinished chunk while many receivers are free,
then one sparse pass over the chunks that are nearly everywhere (most of them: a
chunk's last copies trail behind for a few rounds).

The same greedy, compiled (schedule/_greedy.pyx, ``_greedy``), gives exactly these
copies in the same order from the same random stream, 20-40x faster: every rank of a
job computes the schedule on its own, so ranks with and without the build must agree.
It draws each round's permutation from the generator itself, by NumPy's algorithm
(checked against ``rng.permutation`` once per process; if they ever differ, NumPy's
permutations are passed in).  ``copy_blocks`` and ``copy_rounds`` take the compiled
greedy when it is built; ``numpy_copy_rounds`` is the reference (and the fallback).
"""
from __future__ import annotations

import functools

import numpy as np

from .model import BLOCK_COPIES, CopyBlock, copy_blocks_of

from . import _greedy

__all__ = ["copy_blocks", "copy_rounds", "numpy_copy_rounds"]

#: Below this many free receivers the rest of a round runs on the sparse lists.
_SPARSE = 128


def copy_blocks(n: int, seed: int = 0):
    """Yield the copies of the canonical schedule (straggler n-1) as ``CopyBlock``s of
    consecutive rounds (round t < n-1 also holds the exchange of chunk t, implied).
    Compiled when the extension is built, else ``numpy_copy_rounds``: the same copies."""
    if _greedy is not None and _draws_like_numpy():
        return _compiled_blocks(n, seed)
    return copy_blocks_of(copy_rounds(n, seed))


def copy_rounds(n: int, seed: int = 0):
    """Yield the copies of each round of the canonical schedule (straggler n-1).

    Each item is (src, dst, chunk) int64 arrays; round t < n-1 also holds the
    exchange of chunk t between early rank t and the straggler, which is implied.
    Compiled when the extension is built, else ``numpy_copy_rounds``: the same copies.
    """
    if _greedy is None:
        return numpy_copy_rounds(n, seed)
    if not _draws_like_numpy():
        return _compiled_rounds(n, seed)
    return (cols for block in _compiled_blocks(n, seed) for cols in block.rounds())


def _compiled_blocks(n: int, seed: int):
    m = n - 1
    rng = np.random.default_rng(seed)
    state = _greedy.Greedy(m)
    size = max(1, BLOCK_COPIES // max(m, 1))
    t = 0
    while True:
        starts, src, dst, chunk = state.block(t, size, rng)
        if len(starts) > 1:
            yield CopyBlock(t, starts, src, dst, chunk)
        t += len(starts) - 1
        if len(starts) - 1 < size:
            return


def _compiled_rounds(n: int, seed: int):
    """The compiled round with NumPy's own permutations passed in."""
    m = n - 1
    rng = np.random.default_rng(seed)
    state = _greedy.Greedy(m)
    t = 0
    while t < m or state.unfinished_chunks:
        # the NumPy greedy draws one permutation per round with an unfinished chunk
        yield state.step(t, rng.permutation(m) if state.unfinished_chunks else None)
        t += 1


@functools.lru_cache(maxsize=None)
def _draws_like_numpy() -> bool:
    """Whether the compiled greedy's permutations are ``rng.permutation``'s (NumPy's
    algorithm, copied; a NumPy that draws them otherwise must not split the ranks)."""
    for m, seed in ((1, 0), (2, 1), (7, 2), (1000, 3), (4097, 4)):
        rng = np.random.default_rng(seed)
        ours = _greedy.permutations(np.random.default_rng(seed), m, 3)
        if not all(np.array_equal(row, rng.permutation(m)) for row in ours):
            return False
    return True


def numpy_copy_rounds(n: int, seed: int = 0):
    """``copy_rounds`` on NumPy alone: the reference for the compiled greedy."""
    m = n - 1
    rng = np.random.default_rng(seed)
    holds = np.zeros((m, m), dtype=bool)         # holds[chunk, rank]: fully reduced
    count = np.zeros(m, dtype=np.int64)          # early ranks holding each chunk
    unfinished = np.zeros(m, dtype=np.int64)     # unfinished chunks each rank holds
    active: list[int] = []
    t = 0
    while t < m or active:
        copies = _round(t, m, holds, count, unfinished, active, rng) if active else _NONE
        src, dst, chunk = copies
        holds[chunk, dst] = True
        np.add.at(count, chunk, 1)
        np.add.at(unfinished, dst, 1)
        if t < m:
            holds[t, t] = True
            count[t] += 1
            unfinished[t] += 1
            active.append(t)
        done = [c for c in active if count[c] == m]
        if done:
            unfinished -= len(done)
            active[:] = [c for c in active if count[c] < m]
        yield copies
        t += 1


_NONE = (np.zeros(0, np.int64),) * 3


def _round(t, m, holds, count, unfinished, active, rng):
    chunks = np.array(active, dtype=np.int64)    # oldest first
    rows = holds[chunks]
    busy = t < m
    free = m - busy
    straggler_free = not busy
    held = count[chunks]
    free_holders = held - rows[:, t] if busy else held
    sent = np.minimum(free - free_holders, free_holders + straggler_free)
    committed = (m - held) - sent >= held + sent
    recv_key = rows[committed].sum(0, dtype=np.int32)
    if t + 1 < m:
        recv_key[t + 1] += m          # the next busy rank receives last
    send_key = unfinished.astype(np.int32)
    if busy:
        recv_key[t] = send_key[t] = np.iinfo(np.int32).max
    shuffled = rng.permutation(m)     # ties in random order
    order_r = _order(recv_key, shuffled)[:free]
    order_s = _order(send_key, shuffled)[:free]
    picks = _Picks()
    free_r = np.ones(free, dtype=bool)
    free_s = np.ones(free, dtype=bool)
    left = free
    j = len(chunks) - 1
    while j >= 0 and left > _SPARSE:
        row_r, row_s = rows[j][order_r], rows[j][order_s]
        ys = (free_r > row_r).nonzero()[0]
        if len(ys):
            xs = (free_s & row_s).nonzero()[0][:len(ys)]
            free_s[xs] = False
            senders = order_s[xs]
            if straggler_free and len(xs) < len(ys):
                senders = np.append(senders, m)
                straggler_free = False
            ys = ys[:len(senders)]
            free_r[ys] = False
            left -= len(ys)
            picks.add(senders, order_r[ys], chunks[j])
        j -= 1
    if j >= 0:
        straggler_free = _sparse(rows[:j + 1], chunks[:j + 1], order_r[free_r], order_s[free_s],
                                 straggler_free, m, picks)
    return picks.columns()


def _order(key, shuffled):
    """Ranks by ascending key, ties in the order of ``shuffled``."""
    return shuffled[np.argsort(key[shuffled], kind="stable")]


def _sparse(rows, chunks, receivers, senders, straggler_free, m, picks):
    """The rest of the round, newest chunk first, on the few ranks still free."""
    lacking = ~rows[:, receivers]
    which, where = lacking.nonzero()          # by chunk, receivers in preference order
    starts = np.searchsorted(which, np.arange(len(chunks) + 1)).tolist()
    where = where.tolist()
    holding = rows[:, senders].tobytes()
    width = len(senders)
    free_r = bytearray(b"\x01") * len(receivers)
    free_s = bytearray(b"\x01") * width
    first = 0
    receivers_l, senders_l, chunks_l = receivers.tolist(), senders.tolist(), chunks.tolist()
    src, dst, chunk = picks.lists()
    for j in range(len(chunks) - 1, -1, -1):
        ys = [y for y in where[starts[j]:starts[j + 1]] if free_r[y]]
        if not ys:
            continue
        while first < width and not free_s[first]:
            first += 1
        base, xs, x = j * width, [], first
        while x < width and len(xs) < len(ys):
            if free_s[x] and holding[base + x]:
                xs.append(x)
            x += 1
        for x in xs:
            free_s[x] = 0
        xs = [senders_l[x] for x in xs]
        if straggler_free and len(xs) < len(ys):
            xs.append(m)
            straggler_free = False
        for x, y in zip(xs, ys):
            free_r[y] = 0
            src.append(x)
            dst.append(receivers_l[y])
            chunk.append(chunks_l[j])
    return straggler_free


class _Picks:
    """The copies of one round, gathered as arrays and as Python lists."""

    def __init__(self):
        self.arrays = []
        self.src, self.dst, self.chunk = [], [], []

    def add(self, src, dst, chunk):
        self.arrays.append((src, dst, np.full(len(src), chunk, dtype=np.int64)))

    def lists(self):
        return self.src, self.dst, self.chunk

    def columns(self):
        if self.src:
            self.arrays.append(tuple(np.array(v, dtype=np.int64) for v in (self.src, self.dst, self.chunk)))
        if not self.arrays:
            return _NONE
        return tuple(np.concatenate(col) for col in zip(*self.arrays))
