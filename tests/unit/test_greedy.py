"""The compiled greedy round (cython_src/schedule/_greedy.pyx) against its NumPy reference.

Every rank of a job computes the schedule on its own, some maybe without the build,
so the two must give the same copies, in the same order, round by round: both when
the compiled greedy is handed NumPy's permutations (``step``) and when it draws them
itself (``block``, what ``copy_blocks`` and ``copy_rounds`` run).
"""
import importlib
import sys

import numpy as np
import pytest

from stragglar_mpi.schedule import greedy, lower_bound_rounds
from stragglar_mpi.schedule.verify import check_stragglar_copies

compiled = pytest.mark.skipif(greedy._greedy is None, reason="the compiled greedy is not built")


def _rounds(rounds):
    return [tuple(np.asarray(col).tolist() for col in cols) for cols in rounds]


def _compiled_rounds(n, seed=0):
    return _rounds(greedy._compiled_rounds(n, seed))


def _block_rounds(n, seed=0):
    return _rounds(cols for block in greedy._compiled_blocks(n, seed) for cols in block.rounds())


@compiled
@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 9, 12, 17, 33, 65, 66, 67, 100, 129, 257, 300, 383, 700])
def test_compiled_greedy_gives_the_numpy_copies(n):
    assert _compiled_rounds(n) == _rounds(greedy.numpy_copy_rounds(n))


@compiled
@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 9, 12, 17, 33, 65, 66, 67, 100, 129, 257, 300, 383, 700])
def test_compiled_greedy_drawing_its_own_permutations_gives_the_numpy_copies(n):
    assert _block_rounds(n) == _rounds(greedy.numpy_copy_rounds(n))


@compiled
@pytest.mark.parametrize("n,seed", [(130, 1), (301, 7), (301, 8), (511, 3), (1000, 5)])
def test_compiled_blocks_follow_the_random_stream(n, seed):
    assert _block_rounds(n, seed) == _rounds(greedy.numpy_copy_rounds(n, seed))


@compiled
@pytest.mark.parametrize("m", [1, 2, 3, 5, 64, 65, 1000, 4095, 70000])
def test_compiled_permutations_are_numpys(m):
    """Several in a row from one generator: NumPy keeps half of a 64-bit draw for the next."""
    for seed in (0, 1, 12345):
        rng = np.random.default_rng(seed)
        ours = greedy._greedy.permutations(np.random.default_rng(seed), m, 4)
        assert all(np.array_equal(row, rng.permutation(m)) for row in ours)
    assert greedy._draws_like_numpy()


@compiled
def test_blocks_cover_the_rounds_in_order(monkeypatch):
    monkeypatch.setattr(greedy, "BLOCK_COPIES", 1000)
    blocks = list(greedy._compiled_blocks(300, 0))
    assert [b.first for b in blocks] == list(np.cumsum([0] + [b.count for b in blocks[:-1]]))
    assert all(b.count == 1000 // 299 for b in blocks[:-1]) and blocks[-1].count <= 1000 // 299
    assert sum(len(b.src) for b in blocks) == sum(len(src) for src, _, _ in greedy.numpy_copy_rounds(300))


@compiled
def test_if_numpy_drew_otherwise_its_permutations_are_passed_in(monkeypatch):
    usual = _rounds(greedy.copy_rounds(300))
    monkeypatch.setattr(greedy, "_draws_like_numpy", lambda: False)
    monkeypatch.setattr(greedy, "_compiled_blocks", None)      # must not be used
    assert _rounds(greedy.copy_rounds(300)) == usual
    assert _rounds(cols for block in greedy.copy_blocks(300) for cols in block.rounds()) == usual


@compiled
@pytest.mark.parametrize("seed", [1, 7])
def test_compiled_greedy_follows_the_random_stream(seed):
    assert _compiled_rounds(301, seed) == _rounds(greedy.numpy_copy_rounds(301, seed))
    assert _compiled_rounds(301, seed) != _compiled_rounds(301, seed + 1)


@compiled
@pytest.mark.wallclock
def test_compiled_greedy_at_a_thousand_ranks():
    ours = _compiled_rounds(1000)
    assert ours == _rounds(greedy.numpy_copy_rounds(1000))
    assert len(ours) - lower_bound_rounds(1000) <= 2


@pytest.mark.parametrize("sparse", [0, 10 ** 9])
def test_the_dense_and_the_sparse_pass_are_one_rule(monkeypatch, sparse):
    """What lets one compiled loop stand for both: the NumPy greedy all dense or all
    sparse gives the copies of its usual split."""
    usual = _rounds(greedy.numpy_copy_rounds(300))
    monkeypatch.setattr(greedy, "_SPARSE", sparse)
    assert _rounds(greedy.numpy_copy_rounds(300)) == usual


@compiled
def test_compiled_blocks_refuse_negative_rounds():
    state = greedy._greedy.Greedy(5)
    with pytest.raises(ValueError, match="negative"):
        state.block(-1, 4, np.random.default_rng(0))


@compiled
def test_compiled_greedy_refuses_a_bad_permutation():
    state = greedy._greedy.Greedy(5)
    state.step(0, None)
    with pytest.raises(ValueError, match="not a permutation"):
        state.step(1, np.array([0, 0, 1, 2, 3]))
    with pytest.raises(ValueError, match="not a permutation"):
        state.step(1, np.arange(4))
    with pytest.raises(ValueError, match="negative"):
        state.step(-1, np.arange(5))
