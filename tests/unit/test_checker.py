"""The compiled round checker (cython_src/schedule/_checker.pyx, behind verify.CopyRounds)
against its NumPy oracle (oracles.py).

Both run the one-bit proof of ``verify.CopyRounds``, so both must accept the same
schedules and refuse broken ones with the same words.
"""
import numpy as np
import pytest

from oracles import NumpyCopyRounds
from stragglar_mpi.schedule import ScheduleError
from stragglar_mpi.schedule.model import CopyBlock
from stragglar_mpi.schedule.stragglar import copy_columns
from stragglar_mpi.schedule.verify import CopyRounds

CHECKERS = {True: CopyRounds, False: NumpyCopyRounds}     # compiled, or the oracle


def _rounds(n):
    return [tuple(np.asarray(col).copy() for col in cols) for cols in copy_columns(n)]


def _verdict(n, rounds, compiled_checker):
    state = CHECKERS[compiled_checker](n)
    try:
        for cols in rounds:
            state.check_round(*cols)
        state.finish()
    except ScheduleError as exc:
        return str(exc)
    return state.rounds


def _blocks(rounds, size):
    """The rounds as CopyBlocks of ``size`` rounds."""
    for first in range(0, len(rounds), size):
        part = rounds[first:first + size]
        starts = np.cumsum([0] + [len(src) for src, _, _ in part])
        yield CopyBlock(first, starts, *(np.concatenate(col) for col in zip(*part)))


EDITS = {
    "drop": lambda s, d, c, i: (np.delete(s, i), np.delete(d, i), np.delete(c, i)),
    "sender twice": lambda s, d, c, i: (np.r_[s[:i], s[(i + 1) % len(s)], s[i + 1:]], d, c),
    "receiver twice": lambda s, d, c, i: (s, np.r_[d[:i], d[(i + 1) % len(d)], d[i + 1:]], c),
    "other chunk": lambda s, d, c, i: (s, d, np.r_[c[:i], (c[i] + 1) % max(c.max(), 1), c[i + 1:]]),
    "to itself": lambda s, d, c, i: (s, np.r_[d[:i], s[i], d[i + 1:]], c),
    "out of range": lambda s, d, c, i: (s, np.r_[d[:i], 10 ** 6, d[i + 1:]], c),
    "negative chunk": lambda s, d, c, i: (s, d, np.r_[c[:i], -1, c[i + 1:]]),
}


@pytest.mark.parametrize("n", [3, 5, 6, 8, 16, 33, 100, 300])
def test_both_checkers_accept_the_canonical_schedule(n):
    rounds = _rounds(n)
    assert _verdict(n, rounds, True) == _verdict(n, rounds, False) == len(rounds)


@pytest.mark.parametrize("n", [8, 33, 300])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_both_checkers_refuse_a_broken_round_with_the_same_words(n, edit):
    rng = np.random.default_rng(n)
    rounds = _rounds(n)
    busy = [r for r, (src, _, _) in enumerate(rounds) if len(src) > 1]
    for r in rng.choice(busy, 4, replace=False):
        broken = list(rounds)
        broken[r] = EDITS[edit](*rounds[r], int(rng.integers(len(rounds[r][0]))))
        ours = _verdict(n, broken, True)
        assert isinstance(ours, str), f"{edit} in round {r} passed"
        assert ours == _verdict(n, broken, False)


def test_both_checkers_refuse_a_missing_last_round_and_too_few_rounds():
    rounds = _rounds(300)
    for broken in (rounds[:-1], rounds[:200], rounds[:-1] + [tuple(np.zeros(0, np.int64) for _ in range(3))]):
        ours = _verdict(300, broken, True)
        assert isinstance(ours, str) and ours == _verdict(300, broken, False)


@pytest.mark.parametrize("compiled_checker", [True, False])
def test_blocks_are_checked_like_rounds(compiled_checker):
    rounds = _rounds(300)
    for size in (1, 7, 64):
        state = CHECKERS[compiled_checker](300)
        for block in _blocks(rounds, size):
            state.check_block(block)
        state.finish()
        assert state.rounds == len(rounds)
    broken = list(rounds)
    broken[100] = EDITS["other chunk"](*rounds[100], 3)
    state = CHECKERS[compiled_checker](300)
    with pytest.raises(ScheduleError, match="round 100: rank .* does not hold it fully reduced"):
        for block in _blocks(broken, 64):
            state.check_block(block)


def test_a_block_must_follow_the_last_round_checked():
    rounds = _rounds(33)
    state = CopyRounds(33)
    blocks = list(_blocks(rounds, 4))
    state.check_block(blocks[0])
    with pytest.raises(ScheduleError, match="round 8 comes after round 3"):
        state.check_block(blocks[2])


def test_columns_of_different_lengths_are_refused():
    state = CopyRounds(8)
    with pytest.raises(ScheduleError, match="round 0: copy columns of different lengths"):
        state.check_round(np.array([1]), np.array([2, 3]), np.array([0]))
