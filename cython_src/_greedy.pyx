# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The NumPy greedy of stragglar_mpi/schedule/greedy.py, one round at a time in C.

Every rank of a job computes the schedule on its own, with or without this module,
so it must give exactly the copies of ``greedy._numpy_rounds``, in the same order:
the caller passes in the round's ``rng.permutation`` (the same random stream), and
the rule is the same (newest unfinished chunk first; its free receivers lacking it
in receiver order, paired with the first free senders holding it in sender order;
the straggler once as an extra sender when senders run short).  The NumPy version
splits that rule into a dense pass and a sparse pass for speed; here one loop over
the chunks runs it on lists of the ranks still free (dead entries skipped, the list
compacted when half of it is dead).  A chunk with few holders (the newest ones, which
lack almost every rank) takes its free holders from a short list of them, sorted into
sender order, and stops looking for receivers once it has one per sender: so a round
costs about (chunks while many ranks are free) * n + (the rest) * (ranks free).

State: holds[chunk, rank] as bytes (n^2 bytes: 16 MiB at n=4096), the holder count
of each chunk and its first ``FEW`` holders, the unfinished chunks each rank holds,
the unfinished chunks.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy, memset

import numpy as np

#: A chunk with at most this many holders finds its senders in the list of them.
cdef enum:
    FEW = 64


cdef class Greedy:
    """The greedy's state for ``m`` early ranks (straggler m), round after round."""
    cdef int m, n_active
    cdef uint8_t[:, ::1] holds
    cdef int32_t[:, ::1] few, lacking
    cdef int64_t[::1] count, unfinished, active, recv_key, buckets, pos_r, pos_s
    cdef int64_t[::1] order_r, order_s, live_r, live_s, ys, xs, spare, src, dst, chunk
    cdef uint8_t[::1] free_r, free_s

    def __init__(self, int m):
        self.m = m
        self.n_active = 0
        self.holds = np.zeros((m, m), dtype=np.uint8)
        self.few, self.lacking = np.zeros((m, FEW), np.int32), np.zeros((m, FEW), np.int32)
        self.count, self.unfinished, self.active, self.recv_key, self.pos_r, self.pos_s = (
            np.zeros(m, np.int64) for _ in range(6))
        self.order_r, self.order_s, self.live_r, self.live_s, self.ys, self.xs, self.spare = (
            np.zeros(m, np.int64) for _ in range(7))
        self.src, self.dst, self.chunk = (np.zeros(m + 1, np.int64) for _ in range(3))
        self.buckets = np.zeros(2 * m + 2, np.int64)
        self.free_r, self.free_s = np.zeros(m, np.uint8), np.zeros(m, np.uint8)

    @property
    def unfinished_chunks(self) -> int:
        return self.n_active

    def step(self, int t, shuffled):
        """Round ``t``'s copies as (src, dst, chunk) int64 arrays, then apply them.

        ``shuffled`` is the round's ``rng.permutation(m)`` (ties in that order); None
        when no chunk is unfinished (then no permutation is drawn and there are no copies)."""
        cdef int picks = 0
        if t < 0:
            raise ValueError(f"round {t} is negative")
        if self.n_active:
            order = np.ascontiguousarray(shuffled, dtype=np.int64)
            if order.shape != (self.m,) or not self._is_permutation(order):
                raise ValueError(f"not a permutation of {self.m} ranks")
            picks = self._round(t, order)
        columns = (np.array(self.src[:picks]), np.array(self.dst[:picks]),
                   np.array(self.chunk[:picks]))
        self._apply(t, picks)
        return columns

    cdef bint _is_permutation(self, int64_t[::1] order):
        cdef int i
        cdef uint8_t *seen = &self.free_r[0]
        memset(seen, 0, self.m)
        for i in range(self.m):
            if not 0 <= order[i] < self.m or seen[order[i]]:
                return False
            seen[order[i]] = 1
        return True

    cdef int _round(self, int t, int64_t[::1] shuffled) except -1:
        cdef int m = self.m
        cdef bint busy = t < m
        cdef int free = m - busy
        cdef bint straggler_free = not busy
        cdef int j, c, i, w, nr, ns, len_r, len_s, ny, nx, k, senders, limit, picks = 0
        cdef int64_t held, h, free_holders, sent, x, y
        cdef uint8_t *row
        cdef int64_t *key = &self.recv_key[0]
        cdef int64_t *live_r = &self.live_r[0]
        cdef int64_t *live_s = &self.live_s[0]
        cdef int64_t *ys = &self.ys[0]
        cdef int64_t *xs = &self.xs[0]
        cdef uint8_t *free_r = &self.free_r[0]
        cdef uint8_t *free_s = &self.free_s[0]
        memset(key, 0, m * sizeof(int64_t))
        for j in range(self.n_active):            # chunks that will need every holder next round
            c = self.active[j]
            row = &self.holds[c, 0]
            held = self.count[c]
            free_holders = held - row[t] if busy else held
            sent = min(free - free_holders, free_holders + straggler_free)
            if (m - held) - sent >= held + sent:
                for i in range(m):
                    key[i] += row[i]
        if t + 1 < m:
            key[t + 1] += m                       # the next busy rank receives last
        # ranks by ascending key, ties in the order of ``shuffled``; the busy rank's key
        # is the largest of all, and it is not free: left out
        self._order(t if busy else -1, shuffled, self.recv_key, self.order_r)
        self._order(t if busy else -1, shuffled, self.unfinished, self.order_s)
        memcpy(live_r, &self.order_r[0], free * sizeof(int64_t))
        memcpy(live_s, &self.order_s[0], free * sizeof(int64_t))
        memset(free_r, 0, m)
        memset(free_s, 0, m)
        for i in range(free):
            free_r[live_r[i]] = 1
            free_s[live_s[i]] = 1
            self.pos_r[live_r[i]] = i
            self.pos_s[live_s[i]] = i
        nr = ns = len_r = len_s = free
        for j in range(self.n_active - 1, -1, -1):   # newest chunk first
            if nr == 0 or (ns == 0 and not straggler_free):
                break
            c = self.active[j]
            row = &self.holds[c, 0]
            h = self.count[c]
            if h <= FEW and h < ns:
                # few holders: its free ones in sender order, then a receiver for each
                # (and one for the straggler): most ranks lack this chunk
                nx = self._free_holders(c, h, xs)
                limit = nx + straggler_free
                ny = i = 0
                while i < len_r and ny < limit:     # branch-free: the tests are coin tosses
                    y = live_r[i]
                    ys[ny] = y
                    ny += free_r[y] & (row[y] ^ 1)
                    i += 1
            else:
                if m - h <= FEW and 4 * (m - h) < len_r:
                    # few ranks lack it: its free ones in receiver order
                    ny = self._free_lacking(c, m - h, ys)
                else:
                    ny = w = 0
                    for i in range(len_r):             # and drop the dead entries on the way
                        y = live_r[i]
                        ys[ny] = y
                        ny += free_r[y] & (row[y] ^ 1)
                        live_r[w] = y
                        w += free_r[y]
                    len_r = w
                nx = i = 0
                while i < len_s and nx < ny:
                    x = live_s[i]
                    xs[nx] = x
                    nx += free_s[x] & row[x]
                    i += 1
            senders = min(nx, ny)
            k = senders
            if straggler_free and nx < ny:
                k = nx + 1
                straggler_free = False
            for i in range(k):
                self.src[picks] = xs[i] if i < senders else m
                self.dst[picks] = ys[i]
                self.chunk[picks] = c
                picks += 1
                free_r[ys[i]] = 0
            for i in range(senders):
                free_s[xs[i]] = 0
            nr -= k
            ns -= senders
            if len_r > 2 * nr + 16:
                len_r = _compact(live_r, len_r, free_r)
            if len_s > 2 * ns + 16:
                len_s = _compact(live_s, len_s, free_s)
        return picks

    cdef int _free_holders(self, int c, int64_t h, int64_t *xs):
        """The free holders of chunk ``c`` (all ``h`` on its list) in sender order."""
        return self._free_in_order(self.few[c], h, self.free_s, self.pos_s, self.order_s, xs)

    cdef int _free_lacking(self, int c, int64_t lack, int64_t *ys):
        """The free ranks lacking chunk ``c`` (all ``lack`` on its list) in receiver order."""
        return self._free_in_order(self.lacking[c], lack, self.free_r, self.pos_r, self.order_r, ys)

    cdef int _free_in_order(self, int32_t[::1] ranks, int64_t count, uint8_t[::1] free,
                            int64_t[::1] pos, int64_t[::1] order, int64_t *out):
        """The free ones of the first ``count`` ``ranks``, in the order ``order`` (``pos``
        is each rank's place in it)."""
        cdef int q, k = 0
        cdef int64_t r
        cdef int64_t *spare = &self.spare[0]
        for q in range(count):
            r = ranks[q]
            if free[r]:
                spare[k] = pos[r]
                k += 1
        _sort(spare, k)
        for q in range(k):
            out[q] = order[spare[q]]
        return k

    cdef void _order(self, int skip, int64_t[::1] shuffled, int64_t[::1] key, int64_t[::1] out):
        """Counting sort of ``shuffled`` (less ``skip``) by ``key``: stable, O(m)."""
        cdef int i, r
        cdef int64_t pos, top = 0, total = 0, size
        cdef int64_t[::1] buckets = self.buckets
        for r in range(self.m):
            if r != skip and key[r] > top:
                top = key[r]
        if top + 2 > buckets.shape[0]:
            self.buckets = buckets = np.zeros(top + 2, np.int64)
        else:
            buckets[:top + 1] = 0
        for r in range(self.m):
            if r != skip:
                buckets[key[r]] += 1
        for i in range(top + 1):
            size = buckets[i]
            buckets[i] = total
            total += size
        for i in range(self.m):
            r = shuffled[i]
            if r != skip:
                pos = buckets[key[r]]
                out[pos] = r
                buckets[key[r]] = pos + 1

    cdef void _apply(self, int t, int picks):
        cdef int i, j, c, d, r, done = 0, kept = 0, m = self.m
        for i in range(picks):
            c, d = self.chunk[i], self.dst[i]
            self._receive(c, d)
            self.unfinished[d] += 1
        if t < m:
            self._receive(t, t)
            self.unfinished[t] += 1
            self.active[self.n_active] = t
            self.n_active += 1
        for j in range(self.n_active):
            c = self.active[j]
            if self.count[c] == m:
                done += 1
            else:
                self.active[kept] = c
                kept += 1
        self.n_active = kept
        if done:
            for r in range(m):
                self.unfinished[r] -= done

    cdef inline void _receive(self, int c, int d):
        """Rank d now holds chunk c: its lists of holders (while short) and of the
        ranks lacking it (once short: built from the row, then kept)."""
        cdef int64_t k = self.count[c], lack = self.m - k - 1, q, r, w = 0
        self.holds[c, d] = 1
        if k < FEW:
            self.few[c, k] = d
        self.count[c] = k + 1
        if lack > FEW:
            return
        if k == 0 or lack == FEW:
            for r in range(self.m):
                if not self.holds[c, r]:
                    self.lacking[c, w] = r
                    w += 1
            return
        for q in range(lack + 1):
            if self.lacking[c, q] == d:
                self.lacking[c, q] = self.lacking[c, lack]
                return


cdef inline void _sort(int64_t *a, int length):
    """Insertion sort: length <= FEW."""
    cdef int i, j
    cdef int64_t p
    for i in range(1, length):
        p = a[i]
        j = i - 1
        while j >= 0 and a[j] > p:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = p


cdef inline int _compact(int64_t *ranks, int length, uint8_t *free):
    """Drop the ranks no longer free, keeping the order; the new length."""
    cdef int i, w = 0
    for i in range(length):
        if free[ranks[i]]:
            ranks[w] = ranks[i]
            w += 1
    return w
