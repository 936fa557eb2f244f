"""Ring, recursive halving/doubling and the paper's "direct" algorithm as schedules.

They share the model, the verifier, the executor and the simulator with StragglAR,
so comparisons between algorithms compare schedules, not implementations.
"""
from __future__ import annotations

from .model import Schedule, ScheduleError, Transfer, gc_paused
from .algorithms import DIRECT, RHD, RING

__all__ = ["ring", "rhd", "direct"]


def ring(n: int) -> Schedule:
    """Ring AllReduce: n-1 ReduceScatter rounds, then n-1 AllGather rounds."""
    _check_n(n)
    with gc_paused():
        return _ring(n)


def _ring(n: int) -> Schedule:
    reduce_scatter = [
        tuple(Transfer(i, (i + 1) % n, (i - k) % n, True) for i in range(n))
        for k in range(n - 1)
    ]
    # After the ReduceScatter rank i holds chunk i+1 fully reduced.
    allgather = [
        tuple(Transfer(i, (i + 1) % n, (i + 1 - k) % n) for i in range(n))
        for k in range(n - 1)
    ]
    return Schedule(RING, n, None, n, reduce_scatter + allgather)


def rhd(n: int) -> Schedule:
    """Recursive halving/doubling over p = 2**floor(log2 n) chunks (MPICH fold for the rest).

    The r = n - p extra ranks (even ranks below 2r) first hand their whole buffer
    to their odd neighbour, sit out, and get the result back in the last round.
    """
    _check_n(n)
    with gc_paused():
        return _rhd(n)


def _rhd(n: int) -> Schedule:
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    members = [2 * k + 1 for k in range(extra)] + list(range(2 * extra, n))
    fold = _whole_buffers([(2 * k, 2 * k + 1) for k in range(extra)], p, True)
    unfold = _whole_buffers([(2 * k + 1, 2 * k) for k in range(extra)], p, False)
    rounds = [fold] + _halving(members, p) + _doubling(members, p) + [unfold]
    return Schedule(RHD, n, None, p, [rnd for rnd in rounds if rnd])


def _whole_buffers(pairs, chunks: int, reduce: bool) -> tuple[Transfer, ...]:
    return tuple(Transfer(src, dst, c, reduce) for src, dst in pairs for c in range(chunks))


def _halving(members: list[int], p: int) -> list[tuple[Transfer, ...]]:
    """ReduceScatter: member k ends holding chunk k fully reduced."""
    rounds, mask = [], p // 2
    while mask:
        rnd = []
        for k, rank in enumerate(members):
            lo = k & ~(2 * mask - 1)           # start of the block k still reduces
            give = lo if k & mask else lo + mask  # the half that the partner keeps
            rnd += [Transfer(rank, members[k ^ mask], c, True) for c in range(give, give + mask)]
        rounds.append(tuple(rnd))
        mask //= 2
    return rounds


def _doubling(members: list[int], p: int) -> list[tuple[Transfer, ...]]:
    """AllGather: member k starts with chunk k and doubles its block every round."""
    rounds, mask = [], 1
    while mask < p:
        rnd = []
        for k, rank in enumerate(members):
            lo = k & ~(mask - 1)
            rnd += [Transfer(rank, members[k ^ mask], c) for c in range(lo, lo + mask)]
        rounds.append(tuple(rnd))
        mask *= 2
    return rounds


def direct(n: int, straggler: int | None = None) -> Schedule:
    """The paper's "direct": early ranks finished a full AllReduce during the delay.

    Round 0: the straggler and the first early rank swap and reduce the whole
    buffer; then both broadcast it by doubling, ceil(log2 n) rounds in all.
    """
    _check_n(n)
    straggler = n - 1 if straggler is None else straggler
    if not 0 <= straggler < n:
        raise ScheduleError(f"straggler must be in 0..{n - 1}, got {straggler}")
    if n == 1:
        return Schedule(DIRECT, 1, 0, 1, ())
    early = [r for r in range(n) if r != straggler]
    rounds = [(Transfer(early[0], straggler, 0, True), Transfer(straggler, early[0], 0, True))]
    holders, waiting = [straggler, early[0]], early[1:]
    while waiting:
        pairs = list(zip(holders, waiting))
        rounds.append(tuple(Transfer(src, dst, 0) for src, dst in pairs))
        holders += [dst for _, dst in pairs]
        waiting = waiting[len(pairs):]
    return Schedule(DIRECT, n, straggler, 1, rounds)


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ScheduleError(f"n must be an int >= 1, got {n!r}")
