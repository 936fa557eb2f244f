"""Oracles: NumPy twins of the compiled schedule code, kept here to test it against.

- ``numpy_copy_rounds``: the greedy of stragglar_mpi/schedule/greedy.py on NumPy, which
  the compiled one (cython_src/schedule/_greedy.pyx) must match copy for copy.  State is
  one boolean chunk x rank matrix; a round costs a few vector operations per unfinished
  chunk while many receivers are free, then one sparse pass over the chunks that are
  nearly everywhere (most of them: a chunk's last copies trail behind for a few rounds).
- ``NumpyCopyRounds``: the round check of verify.CopyRounds on NumPy, which the compiled
  checker (cython_src/schedule/_checker.pyx) must match verdict for verdict and word for word.
- ``check_stragglar_copies``: the package's checker run to the end on rounds given as
  (src, dst, chunk) columns.
"""
from __future__ import annotations

import numpy as np

from stragglar_mpi.schedule import ScheduleError
from stragglar_mpi.schedule.verify import CopyRounds

#: Below this many free receivers the rest of a round runs on the sparse lists.
_SPARSE = 128


def numpy_copy_rounds(n: int, seed: int = 0):
    """``greedy.copy_rounds`` on NumPy alone: the oracle of the compiled greedy."""
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


def check_stragglar_copies(n: int, rounds) -> int:
    """Check a StragglAR schedule given as copy columns per round with the package's
    checker (``verify.CopyRounds``); its rounds."""
    state = CopyRounds(n)
    for src, dst, chunk in rounds:
        state.check_round(src, dst, chunk)
    state.finish()
    return state.rounds


class NumpyCopyRounds:
    """``verify.CopyRounds`` on NumPy: ``holds[rank, chunk]``, holds chunk c reduced over
    all n ranks; each round checked against the state at its start, then applied."""

    def __init__(self, n: int):
        self.n, self.m, self.rounds = n, n - 1, 0
        self.holds = np.zeros((n, max(n - 1, 1)), dtype=bool)

    def check_round(self, src, dst, chunk) -> None:
        if not len(src) == len(dst) == len(chunk):
            raise ScheduleError(f"round {self.rounds}: copy columns of different lengths")
        t = self.rounds
        _check_copy_round(t, self.n, self.holds, src, dst, chunk)
        self.holds[dst, chunk] = True
        if t < self.m:
            self.holds[t, t] = self.holds[self.m, t] = True
        self.rounds += 1

    def check_block(self, block) -> None:
        if block.first != self.rounds:
            raise ScheduleError(f"round {block.first} comes after round {self.rounds - 1}")
        for cols in block.rounds():
            self.check_round(*cols)

    def finish(self) -> None:
        m = self.m
        if self.rounds < m:
            raise ScheduleError(f"{self.rounds} rounds cannot hold the exchanges of {m} chunks")
        if m and not self.holds.all():
            rank, chunk = np.argwhere(~self.holds)[0]
            raise ScheduleError(f"after the last round rank {rank} lacks chunk {chunk}")


def _check_copy_round(t, n, holds, src, dst, chunk) -> None:
    m = n - 1
    if not len(src):
        return
    if (min(src.min(), dst.min(), chunk.min()) < 0 or max(src.max(), dst.max()) > m
            or chunk.max() >= m):
        raise ScheduleError(f"round {t}: a copy is out of range (n={n})")
    busy = [t, m] if t < m else []
    for name, side in (("sends", src), ("receives", dst)):
        seen = np.bincount(side, minlength=n)
        seen[busy] += 1
        if seen.max() > 1:
            rank = int(seen.argmax())
            raise ScheduleError(f"round {t}: rank {rank} {name} more than once (one-port rule)")
    if (src == dst).any():
        raise ScheduleError(f"round {t}: a rank copies to itself")
    held = holds[src, chunk]
    if not held.all():
        i = int(np.argmin(held))
        raise ScheduleError(f"round {t}: rank {src[i]} copies chunk {chunk[i]} to rank "
                            f"{dst[i]} but does not hold it fully reduced")
