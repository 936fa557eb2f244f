# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The round checker of stragglar_mpi/schedule/verify.py (``CopyRounds``).

It checks StragglAR copy rounds given as (src, dst, chunk) columns, a block of rounds
per call, on the one-bit state of ``verify.CopyRounds`` ("rank r holds chunk c
reduced over all n ranks"; the proof is there), kept as bits chunk by chunk (``bits[c]``:
the ranks holding chunk c; n/8 bytes a chunk): a round's copies come grouped by chunk,
so they touch a few short rows, not the whole state.  A round passes if every
copy is in range, no rank sends or receives twice (the pair exchanging chunk t in
round t < n-1 counts as busy), nobody copies to itself, and every sender holds its chunk
at the start of the round; then its copies and its exchange are applied.  The first
round that fails raises ``ScheduleError`` naming its fault, the state left as it was
before that round (tests/unit/oracles.py holds the NumPy check it is tested against,
word for word).
"""
from libc.stdint cimport int64_t, uint64_t

import numpy as np

from .model import ScheduleError


cdef class CopyChecker:
    """The state of one check of StragglAR's copy rounds at ``n`` ranks."""
    cdef int n, m, words
    cdef uint64_t[:, ::1] bits
    cdef int64_t[::1] sent, received
    cdef int64_t stamp, cells

    def __init__(self, int n):
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n, self.m, self.words = n, n - 1, (n + 63) // 64
        self.bits = np.zeros((max(n - 1, 1), self.words), np.uint64)
        self.sent, self.received = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.stamp = 0
        self.cells = 0

    @property
    def cells_held(self) -> int:
        """(rank, chunk) pairs that hold the full sum so far."""
        return self.cells

    def holds(self):
        """The state as NumPy booleans, rank by chunk (a copy)."""
        rows = np.unpackbits(np.asarray(self.bits).view(np.uint8), axis=1, bitorder="little")
        return rows[:, :self.n].T.astype(bool)

    def check(self, int64_t first, const int64_t[::1] starts, const int64_t[::1] src,
              const int64_t[::1] dst, const int64_t[::1] chunk):
        """Check and apply rounds ``first``, ``first + 1``, ...: round ``first + k`` is
        the copies ``starts[k]:starts[k + 1]``.  Raises ``ScheduleError`` naming the fault
        of the first round that does not pass (it and the rounds after it are not applied)."""
        cdef Py_ssize_t k, rounds = starts.shape[0] - 1
        if first < 0 or rounds < 0 or src.shape[0] != dst.shape[0] or src.shape[0] != chunk.shape[0]:
            raise ValueError("malformed block of copy rounds")
        if rounds and (starts[0] != 0 or starts[rounds] != src.shape[0]):
            raise ValueError("the block's starts do not cover its copies")
        for k in range(rounds):
            if starts[k] > starts[k + 1]:
                raise ValueError("the block's starts are not ascending")
            if not self._round(first + k, &src[0] if src.shape[0] else NULL, &dst[0] if dst.shape[0] else NULL,
                               &chunk[0] if chunk.shape[0] else NULL, starts[k], starts[k + 1]):
                lo, hi = starts[k], starts[k + 1]
                raise ScheduleError(self._fault(first + k, np.asarray(src[lo:hi]),
                                                np.asarray(dst[lo:hi]), np.asarray(chunk[lo:hi])))

    cdef bint _round(self, int64_t t, const int64_t *src, const int64_t *dst,
                     const int64_t *chunk, int64_t lo, int64_t hi) noexcept:
        if not self._valid(t, src, dst, chunk, lo, hi):
            return False
        cdef int64_t i
        for i in range(lo, hi):
            self._give(dst[i], chunk[i])
        if t < self.m:
            self._give(t, t)
            self._give(self.m, t)
        return True

    cdef bint _valid(self, int64_t t, const int64_t *src, const int64_t *dst,
                     const int64_t *chunk, int64_t lo, int64_t hi) noexcept:
        """Ranges, the one-port rule, no copy to oneself, the sender holds the chunk."""
        cdef int64_t i, s, d, c, stamp
        self.stamp += 1
        stamp = self.stamp
        if t < self.m:
            self.sent[t] = self.sent[self.m] = self.received[t] = self.received[self.m] = stamp
        for i in range(lo, hi):
            s, d, c = src[i], dst[i], chunk[i]
            if not (0 <= s <= self.m and 0 <= d <= self.m and 0 <= c < self.m):
                return False
            if s == d or self.sent[s] == stamp or self.received[d] == stamp:
                return False
            self.sent[s] = self.received[d] = stamp
            if not _has(&self.bits[c, 0], s):
                return False
        return True

    def _fault(self, int64_t t, src, dst, chunk):
        """What is wrong with round ``t``, in the order of the rules: a copy out of range,
        a rank that sends or receives twice (the lowest of those most often busy), a copy
        to oneself, the first copy of a chunk its sender does not hold."""
        n, m = self.n, self.m
        if (min(src.min(), dst.min(), chunk.min()) < 0 or max(src.max(), dst.max()) > m
                or chunk.max() >= m):
            return f"round {t}: a copy is out of range (n={n})"
        for name, side in (("sends", src), ("receives", dst)):
            seen = np.bincount(side, minlength=n)
            if t < m:
                seen[[t, m]] += 1
            if seen.max() > 1:
                return f"round {t}: rank {int(seen.argmax())} {name} more than once (one-port rule)"
        if (src == dst).any():
            return f"round {t}: a rank copies to itself"
        for s, d, c in zip(src.tolist(), dst.tolist(), chunk.tolist()):
            if not _has(&self.bits[c, 0], s):
                return (f"round {t}: rank {s} copies chunk {c} to rank {d} but does not hold "
                        "it fully reduced")
        return f"round {t}: refused"     # pragma: no cover  (_valid and the rules above agree)

    cdef inline void _give(self, int64_t rank, int64_t c) noexcept:
        cdef uint64_t *word = &self.bits[c, rank >> 6]
        cdef uint64_t bit = (<uint64_t> 1) << (rank & 63)
        self.cells += (word[0] & bit) == 0
        word[0] |= bit


cdef inline bint _has(const uint64_t *bits, int64_t r) noexcept:
    return (bits[r >> 6] >> (r & 63)) & 1
