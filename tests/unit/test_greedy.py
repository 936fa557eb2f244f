"""The compiled greedy (cython_src/schedule/_greedy.pyx) against its NumPy oracle (oracles.py).

Every rank of a job computes the schedule on its own, so the copies must be a function
of n and the seed alone: those of the NumPy greedy, in the same order, round by round,
the compiled greedy drawing each round's permutation itself as ``rng.permutation`` does.
"""
import numpy as np
import pytest

from oracles import numpy_copy_rounds
from stragglar_mpi.schedule import greedy, lower_bound_rounds


def _rounds(rounds):
    return [tuple(np.asarray(col).tolist() for col in cols) for cols in rounds]


def _compiled_rounds(n, seed=0):
    return _rounds(greedy.copy_rounds(n, seed))


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 9, 12, 17, 33, 65, 66, 67, 100, 129, 257, 300, 383, 700])
def test_compiled_greedy_gives_the_numpy_copies(n):
    assert _compiled_rounds(n) == _rounds(numpy_copy_rounds(n))


@pytest.mark.parametrize("n,seed", [(130, 1), (301, 7), (301, 8), (511, 3), (1000, 5)])
def test_compiled_blocks_follow_the_random_stream(n, seed):
    assert _compiled_rounds(n, seed) == _rounds(numpy_copy_rounds(n, seed))


@pytest.mark.parametrize("m", [1, 2, 3, 5, 64, 65, 1000, 4095, 70000])
def test_compiled_permutations_are_numpys(m):
    """Several in a row from one generator: NumPy keeps half of a 64-bit draw for the next."""
    for seed in (0, 1, 12345):
        rng = np.random.default_rng(seed)
        ours = greedy._greedy.permutations(np.random.default_rng(seed), m, 4)
        assert all(np.array_equal(row, rng.permutation(m)) for row in ours)


def test_blocks_cover_the_rounds_in_order(monkeypatch):
    monkeypatch.setattr(greedy, "BLOCK_COPIES", 1000)
    blocks = list(greedy.copy_blocks(300, 0))
    assert [b.first for b in blocks] == list(np.cumsum([0] + [b.count for b in blocks[:-1]]))
    assert all(b.count == 1000 // 299 for b in blocks[:-1]) and blocks[-1].count <= 1000 // 299
    assert sum(len(b.src) for b in blocks) == sum(len(src) for src, _, _ in numpy_copy_rounds(300))


@pytest.mark.parametrize("seed", [1, 7])
def test_compiled_greedy_follows_the_random_stream(seed):
    assert _compiled_rounds(301, seed) == _rounds(numpy_copy_rounds(301, seed))
    assert _compiled_rounds(301, seed) != _compiled_rounds(301, seed + 1)


@pytest.mark.wallclock
def test_compiled_greedy_at_a_thousand_ranks():
    ours = _compiled_rounds(1000)
    assert ours == _rounds(numpy_copy_rounds(1000))
    assert len(ours) - lower_bound_rounds(1000) <= 2


@pytest.mark.parametrize("sparse", [0, 10 ** 9])
def test_the_dense_and_the_sparse_pass_are_one_rule(monkeypatch, sparse):
    """What lets one compiled loop stand for both: the NumPy greedy all dense or all
    sparse gives the copies of its usual split."""
    import oracles
    usual = _rounds(numpy_copy_rounds(300))
    monkeypatch.setattr(oracles, "_SPARSE", sparse)
    assert _rounds(numpy_copy_rounds(300)) == usual


def test_compiled_blocks_refuse_negative_rounds():
    state = greedy._greedy.Greedy(5)
    with pytest.raises(ValueError, match="negative"):
        state.block(-1, 4, np.random.default_rng(0))
