"""The compiled greedy round (cython_src/_greedy.pyx) against its NumPy reference.

Every rank of a job computes the schedule on its own, some maybe without the build,
so the two must give the same copies, in the same order, round by round.
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


@compiled
@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 9, 12, 17, 33, 65, 66, 67, 100, 129, 257, 300, 383, 700])
def test_compiled_greedy_gives_the_numpy_copies(n):
    assert _compiled_rounds(n) == _rounds(greedy.numpy_copy_rounds(n))


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


def test_without_the_build_copy_rounds_is_the_numpy_greedy(monkeypatch):
    """A checkout without the extension imports, and gives the same schedule."""
    import stragglar_mpi.schedule as room
    monkeypatch.setitem(sys.modules, "stragglar_mpi.schedule._greedy", None)   # import fails
    monkeypatch.delattr(room, "_greedy", raising=False)
    fallback = importlib.reload(greedy)
    try:
        assert fallback._greedy is None
        rounds = list(fallback.copy_rounds(300))
        assert check_stragglar_copies(300, rounds) - lower_bound_rounds(300) <= 2
        assert _rounds(rounds) == _rounds(fallback.numpy_copy_rounds(300))
    finally:
        monkeypatch.undo()
        importlib.reload(greedy)


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
