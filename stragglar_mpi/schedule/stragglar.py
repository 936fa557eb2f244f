"""StragglAR phase-2 schedules for every n.

Labels: the straggler S is rank n-1 and early rank i owns chunk i after the
ReduceScatter of phase 1.  Round r < n-1 always holds the exchange of chunk r
between S and rank r (both reduce); every other transfer copies a fully
reduced chunk.  ``synthesize`` relabels for any other straggler.

Three constructions: the field form for powers of two (a proof, O(1) per rank and
round); the augmenting greedy with its stored seeds up to ``AUGMENTING_MAX``; the
NumPy greedy (``greedy.py``) above it, checked round by round as it is produced.
"""
from __future__ import annotations

import functools
import json
import random
import time
from importlib import resources

from .model import Schedule, ScheduleError, Transfer, gc_paused
from .algorithms import STRAGGLAR

__all__ = ["synthesize", "lower_bound_rounds", "rank_rounds", "copy_blocks", "copy_columns"]

#: Up to this n (not a power of two) the augmenting greedy builds the schedule, with the
#: seeds of data/seeds.json; above it the NumPy greedy of greedy.py (about n^2 log n
#: instead of n^3, at most a round or two longer).
AUGMENTING_MAX = 256


def lower_bound_rounds(n: int) -> int:
    """n-2+ceil(log2 n): S exchanges n-1 chunks, then the last one doubles from 2 holders."""
    return 0 if n <= 1 else n - 2 + (n - 1).bit_length()


def synthesize(n: int, straggler: int | None = None) -> Schedule:
    """The StragglAR schedule for ``n`` ranks with ``straggler`` (default n-1) late."""
    if not isinstance(n, int) or n < 1:
        raise ScheduleError(f"n must be an int >= 1, got {n!r}")
    straggler = n - 1 if straggler is None else straggler
    if not 0 <= straggler < n:
        raise ScheduleError(f"straggler must be in 0..{n - 1}, got {straggler}")
    base = _canonical(n)
    if straggler == base.straggler:
        return base
    early = [r for r in range(n) if r != straggler]
    return base.relabel(early + [straggler])


@functools.lru_cache(maxsize=16)
def _canonical(n: int) -> Schedule:
    with gc_paused():
        return _construct(n)


def _construct(n: int) -> Schedule:
    if n == 1:
        return Schedule(STRAGGLAR, 1, 0, 1, ())
    if n & (n - 1) == 0:
        rounds = _field_rounds(n)
    elif n <= AUGMENTING_MAX:
        rounds = _as_transfers(_greedy_rounds(n, _seeds().get(n, 0)), n - 1)
    else:
        rounds = _as_transfers((zip(*(col.tolist() for col in cols))
                                for cols in _numpy_greedy(n)), n - 1)
    return Schedule(STRAGGLAR, n, n - 1, n - 1, rounds)


def _is_field(n: int) -> bool:
    return n > 2 and n & (n - 1) == 0


def _numpy_greedy(n: int):
    from .greedy import copy_rounds
    return copy_rounds(n, _seeds("numpy").get(n, 0))


def _greedy_blocks(n: int):
    from .greedy import copy_blocks
    return copy_blocks(n, _seeds("numpy").get(n, 0))


def copy_columns(n: int):
    """The copies of the canonical schedule round by round, as (src, dst, chunk) NumPy
    columns (round t < n-1 also holds the exchange of chunk t, implied).  Powers of two
    and large n never build ``Transfer`` objects."""
    import numpy as np
    if _is_field(n):
        return field_round_arrays(n)
    if n > AUGMENTING_MAX:
        return _numpy_greedy(n)
    rounds = _canonical(n).rounds
    return ((np.array([t.src for t in rnd if not t.reduce], dtype=np.int64),
             np.array([t.dst for t in rnd if not t.reduce], dtype=np.int64),
             np.array([t.chunk for t in rnd if not t.reduce], dtype=np.int64)) for rnd in rounds)


def copy_blocks(n: int):
    """``copy_columns`` as ``CopyBlock``s of consecutive rounds (the greedy makes them so)."""
    from .model import copy_blocks_of
    if n > AUGMENTING_MAX and not _is_field(n):
        return _greedy_blocks(n)
    return copy_blocks_of(copy_columns(n))


def rank_rounds(n: int, label: int) -> list[tuple[Transfer, ...]]:
    """The verified transfers of canonical rank ``label`` (straggler n-1), round by round.

    Powers of two: read off the field pattern, O(rounds) time and memory, without
    the whole schedule (the field form is a proof).  Up to ``AUGMENTING_MAX``: the slice
    of the cached canonical schedule, verified once.  Above: one pass of the NumPy
    greedy, checked round by round, keeping only this label's part and its neighbours'.
    """
    if not 0 <= label < n:
        raise ScheduleError(f"rank must be in 0..{n - 1}, got {label}")
    if _is_field(n):
        return _field_rank_rounds(n, label)
    if n > AUGMENTING_MAX:
        return _streamed_slice(n, label)
    return _slice(n, label)


@functools.lru_cache(maxsize=8)
def _slice(n: int, label: int) -> tuple[tuple[Transfer, ...], ...]:
    """One rank's part of the cached canonical schedule.  A rank meets at most three
    labels whatever the straggler (itself, the one below it, the straggler's)."""
    _verified_whole(n)
    return tuple(tuple(t for t in rnd if label in (t.src, t.dst)) for rnd in _canonical(n).rounds)


@functools.lru_cache(maxsize=64)
def _verified_whole(n: int) -> int:
    from .verify import verify
    return len(verify(_canonical(n)).rounds)


_STREAMED: dict[int, dict[int, object]] = {}


def _streamed_slice(n: int, label: int) -> tuple[tuple[Transfer, ...], ...]:
    """A real rank has one of three labels whatever the straggler (its own, the one
    below, the straggler's), so one pass keeps the copies of label-1, label, label+1 and
    n-1; each label's transfers are built when it is first asked for."""
    known = _STREAMED.setdefault(n, {})
    if label not in known:
        if len(_STREAMED) > 4:
            del _STREAMED[next(k for k in _STREAMED if k != n)]
        wanted = {u for u in (label - 1, label, label + 1, n - 1) if 0 <= u < n}
        known.update(_checked_slices(n, wanted))
    if not isinstance(known[label], tuple):
        known[label] = known[label]()
    return known[label]


def _checked_slices(n: int, labels) -> dict[int, object]:
    """Run the greedy once through the round checker; keep the copies of ``labels``.
    Each label maps to a function that builds its transfers round by round."""
    import numpy as np
    from .verify import checked_copy_blocks
    wanted = np.zeros(n, dtype=bool)
    wanted[list(labels)] = True
    parts, rounds = [], 0
    for block in checked_copy_blocks(n, _greedy_blocks(n)):
        parts.append(_wanted_copies(block, wanted))
        rounds = block.first + block.count
    columns = tuple(np.concatenate(col) for col in zip(*parts))   # n > 2: some copies
    return {u: functools.partial(_label_rounds, u, n - 1, rounds, *columns) for u in labels}


def _wanted_copies(block, wanted):
    """(round, src, dst, chunk) of the block's copies from or to a wanted label."""
    import numpy as np
    index = np.flatnonzero(wanted[block.src] | wanted[block.dst])
    rounds = np.searchsorted(block.starts, index, side="right") - 1 + block.first
    return rounds, block.src[index], block.dst[index], block.chunk[index]


def _label_rounds(u: int, m: int, count: int, rounds, src, dst, chunk) -> tuple:
    """Label u's transfers in each of ``count`` rounds: the exchange (if its own), its
    send, its receive, from the copies of a few labels (``rounds`` ascending)."""
    mine = [list(_exchange(t, m, t)) if t < m and u in (t, m) else [] for t in range(count)]
    with gc_paused():
        for side in (src, dst):
            ours = side == u
            for t, s, d, c in zip(*(col[ours].tolist() for col in (rounds, src, dst, chunk))):
                mine[t].append(Transfer(s, d, c))
        return tuple(map(tuple, mine))


def _exchange(rank: int, straggler: int, chunk: int) -> tuple[Transfer, Transfer]:
    """Both ends send and both reduce: partial + raw, the same operands on both sides."""
    return Transfer(rank, straggler, chunk, True), Transfer(straggler, rank, chunk, True)


def _as_transfers(copies_per_round, m: int) -> list[tuple[Transfer, ...]]:
    return [
        (_exchange(t, m, t) if t < m else ()) + tuple(Transfer(*copy) for copy in copies)
        for t, copies in enumerate(copies_per_round)
    ]


@functools.lru_cache(maxsize=None)
def _seeds(which: str = "seeds") -> dict[int, int]:
    """The best greedy seed found offline for each n (see ``best_seed``): "seeds" for the
    augmenting greedy, "numpy" for the NumPy one (greedy.py)."""
    try:
        text = resources.files(__package__).joinpath("data/seeds.json").read_text()
    except FileNotFoundError:
        return {}
    return {int(n): seed for n, seed in json.loads(text).get(which, {}).items()}


def best_seed(n: int, tries: int, seconds: float = float("inf")) -> tuple[int, int]:
    """(seed, rounds) of the shortest greedy schedule among seeds 0..tries-1.

    Stops early at the lower bound or after ``seconds``.  The result goes into
    data/seeds.json (``python -m stragglar_mpi.schedule search``).
    """
    deadline = time.monotonic() + seconds
    best = (0, len(_greedy_rounds(n, 0)))
    for seed in range(1, tries):
        if best[1] == lower_bound_rounds(n) or time.monotonic() > deadline:
            break
        rounds = _greedy_rounds(n, seed, give_up=best[1] - 1)
        if rounds is not None:
            best = (seed, len(rounds))
    return best


# ---------------------------------------------------------------------------
# Powers of two: a binomial pipeline over GF(2^L).
#
# Early rank r is the field element alpha^r (alpha primitive), S is 0.  In round
# t every element v is paired with v + alpha^t, so S meets rank t as StragglAR
# requires.  Any L consecutive powers of alpha are linearly independent, so the
# holders of chunk t-j at the start of round t are exactly the coset
# alpha^(t-j) + span(alpha^(t-j+1) .. alpha^(t-1)): these cosets partition the
# early ranks, every early rank sends the one unfinished chunk it holds, and a
# chunk is everywhere L rounds after its exchange.  In the last L-1 rounds S and
# the ranks whose chunks would not exist double the last chunk instead.
# ---------------------------------------------------------------------------

def _field_rounds(n: int) -> list[tuple[Transfer, ...]]:
    L = n.bit_length() - 1
    m = n - 1
    pattern = _field_pattern(L)
    rounds = []
    for t in range(n - 2 + L):
        busy = t % m
        first = _exchange(busy, m, t) if t < m else (Transfer(m, busy, m - 1),)
        rounds.append(first + tuple(
            Transfer((t + d) % m, (t + partner) % m, min(t + age, m - 1))
            for d, partner, age in pattern if t + age >= 0))
    return rounds


def field_round_arrays(n: int):
    """``_field_rounds(n)`` as NumPy columns, one (src, dst, chunk) triple per round,
    copies only (round t < n-1 also holds the exchange of chunk t with the straggler)."""
    import numpy as np
    L = n.bit_length() - 1
    m = n - 1
    d, partner, age = (np.array(col, dtype=np.int64) for col in zip(*_field_pattern(L)))
    for t in range(n - 2 + L):
        keep = t + age >= 0
        src, dst = (t + d[keep]) % m, (t + partner[keep]) % m
        chunk = np.minimum(t + age[keep], m - 1)
        if t >= m:
            src, dst = np.append(src, m), np.append(dst, t % m)
            chunk = np.append(chunk, m - 1)
        yield src, dst, chunk


def _field_rank_rounds(n: int, u: int) -> list[tuple[Transfer, ...]]:
    """Rank ``u``'s part of ``_field_rounds(n)``: its offset from the busy rank
    gives what it sends, the offset of the rank that sends to it what it receives."""
    L = n.bit_length() - 1
    m = n - 1
    send, recv = _field_tables(L)
    rounds = []
    for t in range(n - 2 + L):
        busy = t % m
        if u == m:
            rounds.append(_exchange(busy, m, t) if t < m else (Transfer(m, busy, m - 1),))
            continue
        d = (u - t) % m
        if d == 0:
            rounds.append(_exchange(u, m, t) if t < m else (Transfer(m, u, m - 1),))
            continue
        mine = []
        partner, age = send[d]
        if t + age >= 0:
            mine.append(Transfer(u, (t + partner) % m, min(t + age, m - 1)))
        source, age = recv[d]
        if t + age >= 0:
            mine.append(Transfer((t + source) % m, u, min(t + age, m - 1)))
        rounds.append(tuple(mine))
    return rounds


@functools.lru_cache(maxsize=None)
def _field_tables(L: int) -> tuple[dict, dict]:
    """By offset from the busy rank: (partner, -age) it sends to, (source, -age) it hears."""
    send, recv = {}, {}
    for d, partner, age in _field_pattern(L):
        send[d] = (partner, age)
        recv[partner] = (d, age)
    return send, recv


@functools.lru_cache(maxsize=None)
def _field_pattern(L: int) -> tuple[tuple[int, int, int], ...]:
    """(d, partner offset, -age) of the rank d places after the busy one, in any round.

    Rank alpha^(t+d) meets alpha^t + alpha^(t+d) = alpha^(t + Zech(d)) and sends
    the chunk whose holder coset it lies in, found from the lowest set bit of
    alpha^(d+L) in the polynomial basis.
    """
    power = _powers_of_primitive(L)
    m = len(power)
    log = {v: r for r, v in enumerate(power)}
    return tuple(
        (d, log[1 ^ power[d]], ((power[(d + L) % m] & -power[(d + L) % m]).bit_length() - 1) - L)
        for d in range(1, m)
    )


@functools.lru_cache(maxsize=None)
def _powers_of_primitive(L: int) -> tuple[int, ...]:
    """alpha^0 .. alpha^(2^L-2) as bit vectors, alpha a root of a primitive polynomial."""
    size = (1 << L) - 1
    for poly in range((1 << L) + 1, 1 << (L + 1), 2):
        powers, x = [], 1
        for _ in range(size):
            powers.append(x)
            x <<= 1
            if x >> L:
                x ^= poly
        if x == 1 and len(set(powers)) == size:
            return tuple(powers)
    raise AssertionError(f"no primitive polynomial of degree {L}")  # pragma: no cover


# ---------------------------------------------------------------------------
# Any n: a randomised greedy, one round at a time.
#
# Capacity is tight (every early rank must send and receive almost every round),
# so the greedy mimics the field construction: the newest chunks go first and
# double; their receivers are ranks whose unfinished chunks will not need them
# as senders next round (a chunk with more holders than ranks still lacking it
# after this round releases its holders).  Ties are broken at random; the seed
# that reaches the fewest rounds for each n is kept in data/seeds.json.
# ---------------------------------------------------------------------------

def _greedy_rounds(n: int, seed: int = 0, give_up: int | None = None):
    """Copies (src, dst, chunk) per round; None if more than ``give_up`` rounds are needed."""
    rng = random.Random(seed)
    m = n - 1
    everyone = (1 << m) - 1
    holds = [0] * m                # chunks each early rank holds fully reduced
    holders = [0] * m              # early ranks holding each chunk
    active: list[int] = []         # born chunks that some early rank still lacks
    rounds = []
    t = 0
    while t < m or active:
        if give_up is not None and t >= give_up:
            return None
        copies = _greedy_round(t, m, holds, holders, active, rng)
        for src, dst, chunk in copies:
            holds[dst] |= 1 << chunk
            holders[chunk] |= 1 << dst
        if t < m:
            holds[t] |= 1 << t
            holders[t] |= 1 << t
            active.append(t)
        active[:] = [c for c in active if holders[c] != everyone]
        rounds.append(copies)
        t += 1
    return rounds


def _greedy_round(t, m, holds, holders, active, rng):
    everyone = (1 << m) - 1
    free_send = free_recv = everyone & ~(1 << t) if t < m else everyone
    straggler_free = t >= m
    active_mask = sum(1 << c for c in active)
    committed = _committed(active, holders, free_send, straggler_free, everyone)
    receivers = _ranked(free_recv, lambda y: (
        y == t + 1, _popcount(holds[y] & committed), rng.random()))
    senders = _ranked(free_send, lambda x: (_popcount(holds[x] & active_mask), rng.random()))
    copies = []
    for c in reversed(active):
        lacking = free_recv & ~holders[c]
        if not lacking:
            continue
        xs = senders.first(free_send & holders[c], _popcount(lacking))
        if straggler_free and len(xs) < _popcount(lacking):
            xs.append(m)
            straggler_free = False
        ys = receivers.first(lacking, len(xs))
        for x, y in zip(xs, ys):
            copies.append((x, y, c))
            free_recv &= ~(1 << y)
            free_send &= ~(1 << x)
    return _augment(copies, t, m, holds, holders, active, free_send, straggler_free)


def _augment(copies, t, m, holds, holders, active, idle, straggler_idle):
    """Kuhn's augmenting paths: re-route copies so that idle senders get a receiver too."""
    everyone = (1 << m) - 1
    sender_of = {y: (x, c) for x, y, c in copies}
    held = holds + [sum(1 << c for c in active)]      # the straggler holds every chunk
    lacking = {c: everyone & ~holders[c] & ~(1 << t) for c in active}
    seen = 0

    width = (m + 7) // 8
    lacking_of_byte: dict[tuple[int, int], int] = {}

    def lacking_union(i, byte):
        """Ranks lacking any of the chunks 8i + (set bits of byte): memoised per round."""
        key = (i, byte)
        if key not in lacking_of_byte:
            lacking_of_byte[key] = functools.reduce(
                int.__or__, (lacking[8 * i + b] for b in range(8) if byte >> b & 1), 0)
        return lacking_of_byte[key]

    def reach(x):
        return reach_of_chunks(held[x] & held[m])

    @functools.lru_cache(maxsize=None)
    def reach_of_chunks(chunks):
        """Ranks that lack some of these unfinished chunks."""
        return functools.reduce(int.__or__, (
            lacking_union(i, b) for i, b in enumerate(chunks.to_bytes(width, "little")) if b), 0)

    def chunk(x, y):
        return (held[x] & held[m] & ~holds[y]).bit_length() - 1

    def candidates(x):
        return reach(x) & ~seen & ~(1 << x)

    def try_send(x):
        """Depth-first search for an augmenting path from x (an explicit stack: paths
        can be longer than Python's recursion limit); on success flip its edges."""
        nonlocal seen
        stack, path = [[x, candidates(x)]], []
        while stack:
            frame = stack[-1]
            while frame[1]:
                low = frame[1] & -frame[1]
                frame[1] ^= low
                if not seen & low:
                    break
            else:
                stack.pop()
                if path:
                    path.pop()
                continue
            seen |= low
            y = low.bit_length() - 1
            if y not in sender_of:
                for (sender, _), receiver in zip(stack, path + [y]):
                    sender_of[receiver] = (sender, chunk(sender, receiver))
                return True
            path.append(y)
            stack.append([sender_of[y][0], candidates(sender_of[y][0])])
        return False

    for x in _bits(idle) + [m] * straggler_idle:
        if held[x] & held[m] and try_send(x):
            seen = 0
    return [(x, y, c) for y, (x, c) in sender_of.items()]


class _ranked:
    """Ranks in order of preference, to pick the best few of any subset quickly."""

    def __init__(self, mask: int, key):
        self.order = sorted(_bits(mask), key=key)
        self.place = {r: i for i, r in enumerate(self.order)}

    def first(self, mask: int, count: int) -> list[int]:
        """The ``count`` most preferred ranks in ``mask``."""
        if not mask or not count:
            return []
        if _popcount(mask) <= 2 * count or _popcount(mask) * 8 < len(self.order):
            return sorted(_bits(mask), key=self.place.__getitem__)[:count]
        chosen = []
        for r in self.order:
            if mask >> r & 1:
                chosen.append(r)
                if len(chosen) == count:
                    break
        return chosen


def _committed(active, holders, free_send, straggler_free, everyone) -> int:
    """Chunks that will still need every holder next round (bitmask)."""
    mask = 0
    for c in active:
        lacking = _popcount(everyone & ~holders[c])
        sent = min(_popcount(free_send & ~holders[c]),
                   _popcount(holders[c] & free_send) + straggler_free)
        if lacking - sent >= _popcount(holders[c]) + sent:
            mask |= 1 << c
    return mask


_popcount = getattr(int, "bit_count", lambda x: bin(x).count("1"))  # bit_count: Python 3.10+


def _bits(mask: int) -> list[int]:
    """Positions of the set bits, lowest first."""
    return [i for i, bit in enumerate(bin(mask)[:1:-1]) if bit == "1"]


def verify_field(n: int) -> int:
    """Verify the canonical power-of-two StragglAR schedule without building it; its rounds."""
    from .model import copy_blocks_of
    from .verify import check_stragglar_blocks
    return check_stragglar_blocks(n, copy_blocks_of(field_round_arrays(n)))


def verify_canonical(n: int) -> int:
    """Verify the canonical StragglAR schedule (straggler n-1) of any n; its rounds.

    Checked as copy columns round by round (``checked_copy_blocks``): the field form
    and the NumPy greedy never build ``Transfer`` objects, so this is O(n^2) time and
    n^2 bytes of state whatever n.
    """
    from .verify import check_stragglar_blocks, verify
    if n <= 2:
        return len(verify(synthesize(n)).rounds)
    return check_stragglar_blocks(n, copy_blocks(n))
