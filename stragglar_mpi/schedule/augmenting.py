"""StragglAR for any n up to ``stragglar.AUGMENTING_MAX``: a randomised greedy, one round at a time.

Capacity is tight (every early rank must send and receive almost every round),
so the greedy mimics the field construction: the newest chunks go first and
double; their receivers are ranks whose unfinished chunks will not need them
as senders next round (a chunk with more holders than ranks still lacking it
after this round releases its holders).  Ties are broken at random; the seed
that reaches the fewest rounds for each n is kept in data/seeds.json.
"""
from __future__ import annotations

import functools
import random


def greedy_rounds(n: int, seed: int = 0, give_up: int | None = None):
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
