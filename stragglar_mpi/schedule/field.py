"""StragglAR for powers of two: a binomial pipeline over GF(2^L) (a proof, O(1) per
rank and round; ``stragglar.py`` dispatches to it).

Early rank r is the field element alpha^r (alpha primitive), S is 0.  In round
t every element v is paired with v + alpha^t, so S meets rank t as StragglAR
requires.  Any L consecutive powers of alpha are linearly independent, so the
holders of chunk t-j at the start of round t are exactly the coset
alpha^(t-j) + span(alpha^(t-j+1) .. alpha^(t-1)): these cosets partition the
early ranks, every early rank sends the one unfinished chunk it holds, and a
chunk is everywhere L rounds after its exchange.  In the last L-1 rounds S and
the ranks whose chunks would not exist double the last chunk instead.
"""
from __future__ import annotations

import functools

from .model import Transfer


def exchange(rank: int, straggler: int, chunk: int) -> tuple[Transfer, Transfer]:
    """Both ends send and both reduce: partial + raw, the same operands on both sides."""
    return Transfer(rank, straggler, chunk, True), Transfer(straggler, rank, chunk, True)


def field_rounds(n: int) -> list[tuple[Transfer, ...]]:
    L = n.bit_length() - 1
    m = n - 1
    pattern = _field_pattern(L)
    rounds = []
    for t in range(n - 2 + L):
        busy = t % m
        first = exchange(busy, m, t) if t < m else (Transfer(m, busy, m - 1),)
        rounds.append(first + tuple(
            Transfer((t + d) % m, (t + partner) % m, min(t + age, m - 1))
            for d, partner, age in pattern if t + age >= 0))
    return rounds


def field_round_arrays(n: int):
    """``field_rounds(n)`` as NumPy columns, one (src, dst, chunk) triple per round,
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


def field_rank_rounds(n: int, u: int) -> list[tuple[Transfer, ...]]:
    """Rank ``u``'s part of ``field_rounds(n)``: its offset from the busy rank
    gives what it sends, the offset of the rank that sends to it what it receives."""
    L = n.bit_length() - 1
    m = n - 1
    send, recv = _field_tables(L)
    rounds = []
    for t in range(n - 2 + L):
        busy = t % m
        if u == m:
            rounds.append(exchange(busy, m, t) if t < m else (Transfer(m, busy, m - 1),))
            continue
        d = (u - t) % m
        if d == 0:
            rounds.append(exchange(u, m, t) if t < m else (Transfer(m, u, m - 1),))
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
