# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The greedy of stragglar_mpi/schedule/greedy.py, round after round in C.

Every rank of a job computes the schedule on its own and must get the same copies, in
the same order: those of the NumPy greedy kept in tests/unit/oracles.py, from the same
random stream (each round's ``rng.permutation``, drawn here from the same generator by
NumPy's own algorithm) and the same rule (newest unfinished chunk first; its free
receivers lacking it in receiver order, paired with the first free senders holding it
in sender order; the straggler once as an extra sender when senders run short).

State: which ranks hold each chunk as bits (``bits[c]``, m/64 words: 2 MiB at n=4096),
so a chunk's free holders and free lacking ranks are a few word operations and their
counts a popcount: a chunk with nothing to do costs m/32 words, not a pass over the
free ranks.  The ones it needs come in preference order either from a scan of the free
ranks in that order (when they are many among them) or from their places in the order
marked in a bit set and read back in order (when few): whichever costs less.
"""
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import numpy as np

cdef extern from *:
    """
    #include <stdint.h>
    /* numpy/random/bitgen.h: the generator behind a numpy.random.Generator's capsule */
    typedef struct {
        void *state;
        uint64_t (*next_uint64)(void *st);
        uint32_t (*next_uint32)(void *st);
        double (*next_double)(void *st);
        uint64_t (*next_raw)(void *st);
    } greedy_bitgen_t;

    /* out = a & (b ^ flip) over n words; the number of bits set in out.  Twice: with the
       popcnt instruction where the CPU has it (chosen at run time), else portable C. */
    #define GREEDY_AND_COUNT_BODY \\
        int64_t k = 0; \\
        for (int64_t w = 0; w < n; w++) { \\
            uint64_t x = a[w] & (b[w] ^ flip); \\
            out[w] = x; \\
            k += __builtin_popcountll(x); \\
        } \\
        return k;
    static int64_t greedy_and_count_any(const uint64_t *a, const uint64_t *b, uint64_t flip,
                                        uint64_t *out, int64_t n) { GREEDY_AND_COUNT_BODY }
    #if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    __attribute__((target("popcnt")))
    static int64_t greedy_and_count_popcnt(const uint64_t *a, const uint64_t *b, uint64_t flip,
                                           uint64_t *out, int64_t n) { GREEDY_AND_COUNT_BODY }
    static int greedy_has_popcnt(void) { __builtin_cpu_init(); return __builtin_cpu_supports("popcnt"); }
    #else
    #define greedy_and_count_popcnt greedy_and_count_any
    static int greedy_has_popcnt(void) { return 0; }
    #endif
    #define greedy_ctz(x) __builtin_ctzll(x)
    """
    ctypedef struct greedy_bitgen_t:
        uint64_t (*next_uint64)(void *st) noexcept nogil
        uint32_t (*next_uint32)(void *st) noexcept nogil
        void *state
    int64_t greedy_and_count_any(const uint64_t *a, const uint64_t *b, uint64_t flip,
                                 uint64_t *out, int64_t n) noexcept nogil
    int64_t greedy_and_count_popcnt(const uint64_t *a, const uint64_t *b, uint64_t flip,
                                    uint64_t *out, int64_t n) noexcept nogil
    int greedy_has_popcnt() noexcept nogil
    int greedy_ctz(uint64_t x) noexcept nogil

ctypedef int64_t (*and_count_t)(const uint64_t *, const uint64_t *, uint64_t, uint64_t *, int64_t) noexcept nogil
cdef and_count_t and_count = greedy_and_count_popcnt if greedy_has_popcnt() else greedy_and_count_any


cdef struct Side:
    # One side of a round's pairing (receivers or senders): the free ranks in the
    # round's order of preference, and a chunk's candidates and choices among them.
    int64_t *order      # the ranks free at the start of the round, preferred first
    int64_t *pos        # each rank's place in order
    int64_t *live       # order, less some of the ranks no longer free
    int64_t live_len
    int64_t free        # ranks still free
    uint64_t *free_set  # the ranks still free, as bits
    uint64_t *members   # a chunk's candidates (free, and lacking or holding it)
    int64_t *chosen     # the first of them in order


cdef class Greedy:
    """The greedy's state for ``m`` early ranks (straggler m), round after round."""
    cdef int m, words, n_active
    cdef uint64_t[:, ::1] bits
    cdef uint64_t[::1] places
    cdef uint64_t[:, ::1] sets
    cdef int64_t[::1] count, unfinished, active, recv_key, hist_r, hist_s, shuffled
    cdef int64_t[:, ::1] ranks
    cdef Side recv, send

    def __init__(self, int m):
        self.m, self.words, self.n_active = m, (m + 63) // 64, 0
        self.bits = np.zeros((m, self.words), np.uint64)    # bits[c]: the ranks holding chunk c
        self.places = np.zeros(self.words, np.uint64)
        self.count, self.unfinished, self.active, self.recv_key, self.shuffled = (
            np.zeros(m + 1, np.int64) for _ in range(5))
        self.hist_r, self.hist_s = np.zeros(2 * m + 4, np.int64), np.zeros(2 * m + 4, np.int64)
        self.sets = np.zeros((4, self.words + 1), np.uint64)
        self.ranks = np.zeros((8, m + 1), np.int64)
        self.recv = _side(&self.ranks[0, 0], &self.ranks[1, 0], &self.ranks[2, 0], &self.ranks[3, 0],
                          &self.sets[0, 0], &self.sets[1, 0])
        self.send = _side(&self.ranks[4, 0], &self.ranks[5, 0], &self.ranks[6, 0], &self.ranks[7, 0],
                          &self.sets[2, 0], &self.sets[3, 0])

    def block(self, int t, int rounds, rng):
        """Rounds ``t``, ``t + 1``, ... as (starts, src, dst, chunk) int64 arrays: round
        t + k is the copies starts[k]:starts[k + 1].  Each round with an unfinished chunk
        draws its permutation from the ``numpy.random.Generator`` ``rng`` (NumPy's
        algorithm, the same numbers as ``rng.permutation``).  Stops before ``rounds``
        rounds when every chunk is born and finished."""
        cdef int k, picks, total = 0
        if t < 0 or rounds < 0:
            raise ValueError(f"round {t}, {rounds} rounds: negative")
        bit_generator = rng.bit_generator
        cdef greedy_bitgen_t *bitgen = <greedy_bitgen_t *> PyCapsule_GetPointer(
            bit_generator.capsule, "BitGenerator")
        starts = np.zeros(rounds + 1, np.int64)
        out = np.empty((3, max(rounds * self.m, 1)), np.int64)
        cdef int64_t[::1] src = out[0], dst = out[1], chunk = out[2], at = starts
        with bit_generator.lock:
            for k in range(rounds):
                if t + k >= self.m and not self.n_active:
                    starts = starts[:k + 1]
                    break
                picks = 0
                if self.n_active:
                    _permutation(bitgen, &self.shuffled[0], self.m)
                    picks = self._round(t + k, src[total:], dst[total:], chunk[total:])
                self._apply(t + k, dst[total:], chunk[total:], picks)
                total += picks
                at[k + 1] = total
        return starts, out[0, :total], out[1, :total], out[2, :total]

    cdef int _round(self, int t, int64_t[::1] src, int64_t[::1] dst, int64_t[::1] chunk) noexcept:
        """Choose round ``t``'s copies (with ``self.shuffled`` for ties) into the columns;
        how many."""
        cdef int m = self.m
        cdef int busy = t if t < m else -1
        cdef bint straggler_free = busy < 0
        cdef int j, c, i, a, b, kr, ks, picks = 0
        self._keys(busy, straggler_free)
        self._orders(busy, t + 1 if t + 1 < m else -1)
        _start(&self.recv, busy, m, self.words)
        _start(&self.send, busy, m, self.words)
        for j in range(self.n_active - 1, -1, -1):   # newest chunk first
            if self.recv.free == 0 or (self.send.free == 0 and not straggler_free):
                break
            c = self.active[j]
            a = and_count(self.recv.free_set, &self.bits[c, 0], <uint64_t> -1, self.recv.members, self.words)
            if a == 0:
                continue
            b = and_count(self.send.free_set, &self.bits[c, 0], 0, self.send.members, self.words)
            ks, kr = min(a, b), min(a, b + straggler_free)
            if kr == 0:
                continue
            self._first(&self.recv, a, kr)
            self._first(&self.send, b, ks)
            for i in range(kr):
                src[picks] = self.send.chosen[i] if i < ks else m
                dst[picks] = self.recv.chosen[i]
                chunk[picks] = c
                picks += 1
            _take(&self.recv, kr)
            _take(&self.send, ks)
            straggler_free = straggler_free and kr == ks
        return picks

    cdef void _keys(self, int busy, bint straggler_free) noexcept:
        """recv_key: how many chunks that will need every holder next round each rank
        holds (a rank holding many of them should not spend its receive on another)."""
        cdef int j, c, w, free = self.m - (busy >= 0)
        cdef int64_t held, free_holders, sent
        cdef uint64_t x
        cdef int64_t *key = &self.recv_key[0]
        memset(key, 0, self.m * sizeof(int64_t))
        for j in range(self.n_active):
            c = self.active[j]
            held = self.count[c]
            free_holders = held - (busy >= 0 and _has(&self.bits[c, 0], busy))
            sent = min(free - free_holders, free_holders + straggler_free)
            if (self.m - held) - sent >= held + sent:
                for w in range(self.words):
                    x = self.bits[c, w]
                    while x:
                        key[w * 64 + greedy_ctz(x)] += 1
                        x &= x - 1

    cdef void _orders(self, int busy, int next_busy) noexcept:
        """The receivers' order: by recv_key; the senders': by unfinished chunks held;
        both ascending, ties in the order of ``shuffled`` (stable counting sorts; keys
        count chunks, so they are at most the unfinished ones).  The next round's busy
        rank receives last: its key would be raised by m, above every other."""
        cdef int i, r, top = self.n_active
        cdef int64_t p
        cdef int64_t *key = &self.recv_key[0]
        cdef int64_t *unfinished = &self.unfinished[0]
        cdef int64_t *hist_r = &self.hist_r[0]
        cdef int64_t *hist_s = &self.hist_s[0]
        _histogram(hist_r, key, self.m, top)
        _histogram(hist_s, unfinished, self.m, top)
        if busy >= 0:
            hist_s[unfinished[busy]] -= 1
            hist_r[key[busy]] -= 1
        if next_busy >= 0:
            hist_r[key[next_busy]] -= 1
        _starts(hist_r, top + 1)
        _starts(hist_s, top + 1)
        for i in range(self.m):
            r = self.shuffled[i]
            if r == busy:
                continue
            p = hist_s[unfinished[r]]
            hist_s[unfinished[r]] = p + 1
            self.send.order[p], self.send.pos[r] = r, p
            if r != next_busy:
                p = hist_r[key[r]]
                hist_r[key[r]] = p + 1
                self.recv.order[p], self.recv.pos[r] = r, p
        if next_busy >= 0:
            p = self.m - (busy >= 0) - 1
            self.recv.order[p], self.recv.pos[next_busy] = next_busy, p

    cdef void _first(self, Side *side, int64_t size, int64_t want) noexcept:
        """side.chosen: the first ``want`` of the ``size`` ranks in side.members, in
        side.order.  A scan of the free ranks in order when the members are dense among
        them (dead ranks dropped from the list first when they are many), else the
        members' places marked in a bit set and read back in order."""
        cdef int64_t i, k = 0, y, w, p
        cdef uint64_t x
        if want * side.free <= size * (4 * self.words + 2 * size):
            if side.live_len > 2 * side.free + 16:
                side.live_len = _compact(side.live, side.live_len, side.free_set)
            i = 0
            while k < want:
                y = side.live[i]
                side.chosen[k] = y
                k += _has(side.members, y)
                i += 1
            return
        for w in range(self.words):
            x = side.members[w]
            while x:
                p = side.pos[w * 64 + greedy_ctz(x)]
                self.places[p >> 6] |= <uint64_t> 1 << (p & 63)
                x &= x - 1
        for w in range(self.words):
            x = self.places[w]
            self.places[w] = 0
            while x and k < want:
                side.chosen[k] = side.order[w * 64 + greedy_ctz(x)]
                k += 1
                x &= x - 1

    cdef void _apply(self, int t, int64_t[::1] dst, int64_t[::1] chunk, int picks) noexcept:
        cdef int i, j, c, kept = 0, done = 0
        for i in range(picks):
            self._receive(chunk[i], dst[i])
        if t < self.m:
            self._receive(t, t)
            self.active[self.n_active] = t
            self.n_active += 1
        for j in range(self.n_active):
            c = self.active[j]
            if self.count[c] == self.m:
                done += 1
            else:
                self.active[kept] = c
                kept += 1
        self.n_active = kept
        if done:
            for i in range(self.m):
                self.unfinished[i] -= done

    cdef inline void _receive(self, int64_t c, int64_t d) noexcept:
        self.bits[c, d >> 6] |= <uint64_t> 1 << (d & 63)
        self.count[c] += 1
        self.unfinished[d] += 1


cdef Side _side(int64_t *order, int64_t *pos, int64_t *live, int64_t *chosen,
                uint64_t *free_set, uint64_t *members) noexcept:
    cdef Side side
    side.order, side.pos, side.live, side.chosen = order, pos, live, chosen
    side.free_set, side.members = free_set, members
    side.live_len = side.free = 0
    return side


cdef void _start(Side *side, int busy, int m, int words) noexcept:
    """Every rank but the busy one free; the live list is the whole order."""
    cdef int w, tail = m % 64
    side.free = side.live_len = m - (busy >= 0)
    memcpy(side.live, side.order, side.free * sizeof(int64_t))
    for w in range(words):
        side.free_set[w] = <uint64_t> -1
    if tail:
        side.free_set[words - 1] = (<uint64_t> 1 << tail) - 1
    if busy >= 0:
        _clear(side.free_set, busy)


cdef inline void _take(Side *side, int64_t k) noexcept:
    """The chosen ranks are no longer free."""
    cdef int64_t i
    for i in range(k):
        _clear(side.free_set, side.chosen[i])
    side.free -= k


cdef inline bint _has(const uint64_t *sets, int64_t r) noexcept:
    return (sets[r >> 6] >> (r & 63)) & 1


cdef inline void _clear(uint64_t *sets, int64_t r) noexcept:
    sets[r >> 6] &= ~(<uint64_t> 1 << (r & 63))


cdef inline void _histogram(int64_t *hist, const int64_t *key, int64_t m, int64_t top) noexcept:
    """hist[k]: how many of key[0:m] are k (all at most top).  Two halves counted apart:
    one counter bumped over and over waits on its own last store."""
    cdef int64_t i, half = m // 2
    cdef int64_t *other = hist + top + 1
    memset(hist, 0, 2 * (top + 1) * sizeof(int64_t))
    for i in range(half):
        hist[key[i]] += 1
        other[key[half + i]] += 1
    if m % 2:
        hist[key[m - 1]] += 1
    for i in range(top + 1):
        hist[i] += other[i]


cdef inline void _starts(int64_t *hist, int64_t size) noexcept:
    """Counts -> the first place of each key (exclusive prefix sums)."""
    cdef int64_t i, total = 0, n
    for i in range(size):
        n = hist[i]
        hist[i] = total
        total += n


cdef inline int64_t _compact(int64_t *ranks, int64_t length, const uint64_t *free) noexcept:
    """Drop the ranks no longer free, keeping the order; the new length."""
    cdef int64_t i, w = 0
    for i in range(length):
        ranks[w] = ranks[i]
        w += _has(free, ranks[i])
    return w


def permutations(rng, int64_t m, int count):
    """``count`` permutations of ``m`` drawn from ``rng`` as the greedy draws them: the
    numbers of ``count`` calls of ``rng.permutation(m)`` (tests/unit/test_greedy.py)."""
    bit_generator = rng.bit_generator
    cdef greedy_bitgen_t *bitgen = <greedy_bitgen_t *> PyCapsule_GetPointer(
        bit_generator.capsule, "BitGenerator")
    out = np.zeros((count, m), np.int64)
    cdef int64_t[:, ::1] rows = out
    cdef int k
    with bit_generator.lock:
        for k in range(count):
            if m:
                _permutation(bitgen, &rows[k, 0], m)
    return out


cdef void _permutation(greedy_bitgen_t *bitgen, int64_t *out, int64_t m) noexcept:
    """``Generator.permutation(m)`` as NumPy draws it: arange, then Fisher-Yates from
    the top, each swap partner from ``random_interval`` (numpy/random/src/distributions)."""
    cdef int64_t i, j
    for i in range(m):
        out[i] = i
    for i in range(m - 1, 0, -1):
        j = _interval(bitgen, i)
        out[i], out[j] = out[j], out[i]


cdef inline int64_t _interval(greedy_bitgen_t *bitgen, uint64_t top) noexcept:
    """A uniform integer in 0..top (top < 2**32): masked rejection, as NumPy does it."""
    cdef uint64_t mask = top, value
    mask |= mask >> 1
    mask |= mask >> 2
    mask |= mask >> 4
    mask |= mask >> 8
    mask |= mask >> 16
    value = bitgen.next_uint32(bitgen.state) & mask
    while value > top:
        value = bitgen.next_uint32(bitgen.state) & mask
    return value
