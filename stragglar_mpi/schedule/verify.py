"""Symbolic execution of a schedule: prove it implements AllReduce or raise.

Every (rank, chunk) holds the set of ranks whose contributions it has summed,
as an int bitmask.  A reducing transfer adds the sender's set to the
receiver's and fails if the two overlap (a contribution counted twice); a copy
must carry a fully reduced chunk.  All transfers of a round read the state at
the start of the round.  At the end every rank must hold every chunk reduced
over all ``n`` ranks, so a missing contribution fails too.  A "reduce_to_owners"
schedule (hierarchical StragglAR's phase 1) starts from the ranks' own contributions
and must end with ``owners[c]`` holding chunk c reduced over every rank but the
straggler, which takes no part in it.

StragglAR whose only reductions are the exchanges with the straggler needs one bit
per (rank, chunk) instead of a set (``_verify_stragglar``, and ``CopyRounds``, compiled,
for schedules given as NumPy columns): n^2 bits instead of n^3, the same proof.
"""
from __future__ import annotations

import operator

from .algorithms import (ALGORITHMS, DIRECT, MULTI_PORT, ONE_CHUNK, PHASE1, REDUCE_TO_OWNERS, RING,
                         SCHEDULE_ONLY, STRAGGLAR, TOPOLOGY_ALGORITHMS, WITH_STRAGGLER)
from .model import CopyBlock, Schedule, ScheduleError, Transfer, gc_paused

from . import _checker

__all__ = ["verify", "check_stragglar_blocks", "checked_copy_blocks", "CopyRounds"]

def verify(schedule: Schedule) -> Schedule:
    """Return ``schedule`` if it implements AllReduce, else raise ``ScheduleError``."""
    with gc_paused():
        return _verify(schedule)


def _verify(schedule: Schedule) -> Schedule:
    _check_header(schedule)
    if schedule.algorithm == STRAGGLAR and schedule.n > 2 and _verify_stragglar(schedule):
        return schedule
    state = _precondition(schedule)
    full = (1 << schedule.n) - 1
    one_chunk = schedule.algorithm in ONE_CHUNK
    for r, rnd in enumerate(schedule.rounds):
        columns = _columns(rnd)
        if schedule.algorithm in MULTI_PORT + SCHEDULE_ONLY:
            _check_multi_port(schedule, r, rnd)
        elif not _ports_ok(schedule, columns, one_chunk):
            _check_ports(schedule, r, rnd, one_chunk)  # finds and names the culprit
        _apply(state, r, columns, full)
    if schedule.algorithm == REDUCE_TO_OWNERS:
        _check_owners(schedule, state)
    else:
        _check_complete(state, full)
    return schedule


def _verify_stragglar(s: Schedule) -> bool:
    """StragglAR whose only reductions are the exchanges (round r: early rank r and the
    straggler, chunk r): one bit per (rank, chunk), "holds the full sum", proves what
    the contribution sets prove (see ``CopyRounds``) in n^2 bits instead of
    n^3.  False (nothing checked) for any other shape of reductions: the contribution
    sets then run and name what is counted twice or missing."""
    if not _exchanges_only(s):
        return False
    m, early, straggler = s.n - 1, s.early, s.straggler
    full = [bytearray(m) for _ in range(s.n)]
    for r, rnd in enumerate(s.rounds):
        if not _ports_ok(s, _columns(rnd), True):
            _check_ports(s, r, rnd, True)
        copies = [t for t in rnd if not t.reduce]
        for t in copies:
            if not full[t.src][t.chunk]:
                missing = _phase1_missing(s, t.src, t.chunk)
                raise ScheduleError(
                    f"round {r}: rank {t.src} copies chunk {t.chunk} to rank {t.dst} but does "
                    f"not hold it fully reduced (missing contributions of ranks {_ranks(missing)})")
        for t in copies:
            full[t.dst][t.chunk] = 1
        if r < m:
            full[early[r]][r] = full[straggler][r] = 1
    for rank, row in enumerate(full):
        if row.count(1) < m:
            chunk = row.index(0)
            raise ScheduleError(f"after the last round rank {rank} holds chunk {chunk} without the "
                                f"contributions of ranks {_ranks(_phase1_missing(s, rank, chunk))}")
    return True


def _exchanges_only(s: Schedule) -> bool:
    m = s.n - 1
    if len(s.rounds) < m:
        return False
    for r, rnd in enumerate(s.rounds):
        reducing = sorted(t for t in rnd if t.reduce)
        if r < m:
            if len(reducing) != 2 or reducing != sorted(
                    [Transfer(s.early[r], s.straggler, r, True), Transfer(s.straggler, s.early[r], r, True)]):
                return False
        elif reducing:
            return False
    return True


def _phase1_missing(s: Schedule, rank: int, chunk: int) -> int:
    """Contributions a (rank, chunk) lacks while no exchange or copy has reached it."""
    everyone = (1 << s.n) - 1
    if rank == s.early[chunk]:
        return 1 << s.straggler
    return everyone & ~(1 << rank)


def _check_multi_port(s: Schedule, r: int, rnd) -> None:
    """Several peers per rank and round; still no chunk twice to one rank in a round."""
    for t in rnd:
        _check_transfer(s, r, t)
    if len({(t.dst, t.chunk) for t in rnd}) < len(rnd):
        _raise_duplicate(r, rnd)


def _columns(rnd):
    return ([t.src for t in rnd], [t.dst for t in rnd], [t.chunk for t in rnd],
            [t.reduce for t in rnd])


def _ports_ok(s: Schedule, columns, one_chunk: bool) -> bool:
    """Fast check of ranges and the one-port rule; False means look closer."""
    srcs, dsts, chunks, _ = columns
    if not srcs:
        return True
    if min(srcs) < 0 or min(dsts) < 0 or max(srcs) >= s.n or max(dsts) >= s.n:
        return False
    if min(chunks) < 0 or max(chunks) >= s.chunks or any(map(operator.eq, srcs, dsts)):
        return False
    if one_chunk:
        return len(set(srcs)) == len(srcs) == len(set(dsts))
    pairs = set(zip(srcs, dsts))
    return (len({a for a, _ in pairs}) == len(pairs) == len({b for _, b in pairs})
            and len(set(zip(dsts, chunks))) == len(dsts))


def _check_header(s: Schedule) -> None:
    if s.algorithm not in ALGORITHMS + TOPOLOGY_ALGORITHMS + SCHEDULE_ONLY:
        raise ScheduleError(f"unknown algorithm {s.algorithm!r}; "
                            f"expected one of {ALGORITHMS + TOPOLOGY_ALGORITHMS + SCHEDULE_ONLY}")
    if s.n < 1:
        raise ScheduleError(f"n must be >= 1, got {s.n}")
    if s.algorithm in WITH_STRAGGLER:
        if s.straggler is None or not 0 <= s.straggler < s.n:
            raise ScheduleError(f"{s.algorithm} needs a straggler in 0..{s.n - 1}, got {s.straggler}")
    expected = {STRAGGLAR: max(s.n - 1, 1), DIRECT: 1, RING: s.n}.get(s.algorithm)
    if expected is not None and s.chunks != expected:
        raise ScheduleError(f"{s.algorithm} with n={s.n} has {expected} chunks, got {s.chunks}")
    if s.chunks < 1:
        raise ScheduleError(f"chunks must be >= 1, got {s.chunks}")
    if REDUCE_TO_OWNERS in (s.algorithm, PHASE1.get(s.algorithm)) and (
            len(s.owners) != s.chunks or s.straggler in s.owners
            or not all(0 <= r < s.n for r in s.owners)):
        raise ScheduleError(f"{s.algorithm} needs one owner per chunk, none of them the "
                            f"straggler; got owners {s.owners} for {s.chunks} chunks")


def _precondition(s: Schedule) -> list[list[int]]:
    """Contribution sets held before round 0, as the ``algorithm`` field says."""
    state = [[1 << r] * s.chunks for r in range(s.n)]
    if s.n == 1 or PHASE1.get(s.algorithm) is None:
        return state
    early_mask = ((1 << s.n) - 1) & ~(1 << s.straggler)
    if PHASE1[s.algorithm] == PHASE1[STRAGGLAR]:      # a ReduceScatter among the early ranks
        for c, rank in enumerate(s.early):
            state[rank][c] = early_mask
    elif PHASE1[s.algorithm] == REDUCE_TO_OWNERS:
        for c, rank in enumerate(s.owners):
            state[rank][c] = early_mask
    else:
        for rank in s.early:
            state[rank] = [early_mask] * s.chunks
    return state


def _check_owners(s: Schedule, state: list[list[int]]) -> None:
    """Phase 1's postcondition: chunk c at owners[c], reduced over all but the straggler."""
    late = next((t for rnd in s.rounds for t in rnd if s.straggler in (t.src, t.dst)), None)
    if late is not None:
        raise ScheduleError(f"the straggler {s.straggler} takes part in phase 1: {late}")
    early = ((1 << s.n) - 1) & ~(1 << s.straggler)
    for c, rank in enumerate(s.owners):
        if state[rank][c] != early:
            raise ScheduleError(f"after the last round owner {rank} holds chunk {c} with "
                                f"contributions {_ranks(state[rank][c])}, not every rank but "
                                f"the straggler {s.straggler}")


def _check_ports(s: Schedule, r: int, rnd, one_chunk: bool) -> None:
    """One port: each rank sends to one peer and receives from one peer per round."""
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    for t in rnd:
        _check_transfer(s, r, t)
        if sends.setdefault(t.src, t.dst) != t.dst:
            raise ScheduleError(f"round {r}: rank {t.src} sends to both rank "
                                f"{sends[t.src]} and rank {t.dst} (one-port rule)")
        if recvs.setdefault(t.dst, t.src) != t.src:
            raise ScheduleError(f"round {r}: rank {t.dst} receives from both rank "
                                f"{recvs[t.dst]} and rank {t.src} (one-port rule)")
    if one_chunk and len(sends) < len(rnd):
        _raise_extra_chunk(r, rnd)
    if not one_chunk and len({(t.dst, t.chunk) for t in rnd}) < len(rnd):
        _raise_duplicate(r, rnd)


def _check_transfer(s: Schedule, r: int, t) -> None:
    if not (0 <= t.src < s.n and 0 <= t.dst < s.n and 0 <= t.chunk < s.chunks):
        raise ScheduleError(f"round {r}: transfer {t} is out of range "
                            f"(n={s.n}, chunks={s.chunks})")
    if t.src == t.dst:
        raise ScheduleError(f"round {r}: rank {t.src} sends chunk {t.chunk} to itself")


def _raise_extra_chunk(r: int, rnd) -> None:
    seen: dict[int, object] = {}
    for t in rnd:
        if t.src in seen:
            raise ScheduleError(f"round {r}: rank {t.src} sends two chunks ({seen[t.src]} "
                                f"and {t}); stragglar sends one chunk per rank per round")
        seen[t.src] = t


def _raise_duplicate(r: int, rnd) -> None:
    seen: dict[tuple[int, int], object] = {}
    for t in rnd:
        if (t.dst, t.chunk) in seen:
            raise ScheduleError(f"round {r}: rank {t.dst} receives chunk {t.chunk} twice "
                                f"({seen[(t.dst, t.chunk)]} and {t})")
        seen[(t.dst, t.chunk)] = t


def _apply(state: list[list[int]], r: int, columns, full: int) -> None:
    """Run one round: every transfer reads the state at the start of the round."""
    srcs, dsts, chunks, reduces = columns
    values = [state[s][c] for s, c in zip(srcs, chunks)]
    if True not in reduces and values.count(full) == len(values):
        for d, c in zip(dsts, chunks):  # the common case: copies of finished chunks
            state[d][c] = full
        return
    for s, d, c, reduce, value in zip(srcs, dsts, chunks, reduces, values):
        if reduce:
            held = state[d][c]
            if held & value:
                raise ScheduleError(
                    f"round {r}: rank {d} reduces chunk {c} from rank {s} and "
                    f"counts contributions of ranks {_ranks(held & value)} twice")
            state[d][c] = held | value
        elif value != full:
            raise ScheduleError(
                f"round {r}: rank {s} copies chunk {c} to rank {d} but does not "
                f"hold it fully reduced (missing contributions of ranks {_ranks(full & ~value)})")
        else:
            state[d][c] = value


def _check_complete(state: list[list[int]], full: int) -> None:
    for rank, row in enumerate(state):
        if row.count(full) == len(row):
            continue
        chunk = next(c for c, v in enumerate(row) if v != full)
        raise ScheduleError(f"after the last round rank {rank} holds chunk {chunk} without "
                            f"the contributions of ranks {_ranks(full & ~row[chunk])}")


def _ranks(mask: int, limit: int = 8) -> str:
    ranks = [i for i in range(mask.bit_length()) if mask >> i & 1]
    shown = ", ".join(map(str, ranks[:limit]))
    return f"[{shown}{', ...' if len(ranks) > limit else ''}]"


def check_stragglar_blocks(n: int, blocks) -> int:
    """Check a StragglAR schedule given as ``CopyBlock``s (``checked_copy_blocks`` to the
    end); its rounds."""
    state = CopyRounds(n)
    for block in blocks:
        state.check_block(block)
    state.finish()
    return state.rounds


def checked_copy_blocks(n: int, blocks):
    """Yield each ``CopyBlock`` (a block of rounds per item, as the greedy makes them) once
    all its rounds are checked (``CopyRounds``); raise ``ScheduleError`` at the first
    fault, or after the last round if some rank lacks some chunk."""
    state = CopyRounds(n)
    for block in blocks:
        state.check_block(block)
        yield block
    state.finish()


class CopyRounds:
    """StragglAR copy rounds, checked in order by the compiled checker (``_checker``) on one
    bit per (rank, chunk): "holds chunk c reduced over all n ranks".

    Rounds come as (src, dst, chunk) int columns; round t < n-1 implicitly also holds the
    exchange of chunk t between early rank t and the straggler n-1 (both reduce, so both
    then hold chunk t fully reduced, phase 1 having left chunk t reduced over the early
    ranks at rank t).  Each round is checked against the state at its start, then applied.

    Why booleans suffice (the same proof as the contribution sets of ``verify``):
    the exchanges are the only reductions, so a (rank, chunk) that no exchange or copy
    has reached still holds what phase 1 left there: never the sum over all ranks,
    and a copy from it is refused.  Rank t and the straggler reduce chunk t with the
    operands phase 1 left (a copy of chunk t before round t would need a holder of the
    full sum, and there is none), so both hold the full sum after round t; a copy of a
    full sum makes another.  So "holds chunk c reduced over all n ranks" is one bit.
    Checks the one-port rule (the exchanging pair does nothing else), that every copy
    carries a chunk its sender holds fully reduced, and that everyone holds everything
    at the end (``finish``).
    """

    def __init__(self, n: int):
        self.n, self.m, self.rounds = n, n - 1, 0
        self.checker = _checker.CopyChecker(n)

    @property
    def holds(self):
        """holds[rank, chunk] after the rounds checked so far (NumPy booleans)."""
        return self.checker.holds()

    def check_round(self, src, dst, chunk) -> None:
        if not len(src) == len(dst) == len(chunk):
            raise ScheduleError(f"round {self.rounds}: copy columns of different lengths")
        self.check_block(CopyBlock.of_round(self.rounds, src, dst, chunk))

    def check_block(self, block) -> None:
        if block.first != self.rounds:
            raise ScheduleError(f"round {block.first} comes after round {self.rounds - 1}")
        self.checker.check(block.first, *block.int64_columns())
        self.rounds = block.first + block.count

    def finish(self) -> None:
        """Raise unless the rounds hold every exchange and everyone holds everything."""
        import numpy as np
        m = self.m
        if self.rounds < m:
            raise ScheduleError(f"{self.rounds} rounds cannot hold the exchanges of {m} chunks")
        if m and self.checker.cells_held != self.n * m:
            rank, chunk = np.argwhere(~self.holds)[0]
            raise ScheduleError(f"after the last round rank {rank} lacks chunk {chunk}")
