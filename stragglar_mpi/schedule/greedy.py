"""StragglAR copies for large n: the round-by-round greedy of ``augmenting.py``, compiled
(schedule/_greedy.pyx).

Same rules as ``augmenting._greedy_round`` (newest chunks first; receivers whose
unfinished chunks will not need them as senders next round; senders holding few
unfinished chunks), without the augmenting paths: they cost about n^3 and buy at
most a round.  Rounds are produced a block at a time as (src, dst, chunk) columns, so a
caller can verify them or keep one rank's part without holding the whole schedule.

Every rank of a job computes the schedule on its own.  Ties are broken by one random
permutation per round with an unfinished chunk, drawn from ``numpy.random.default_rng(seed)``
by NumPy's own algorithm for ``rng.permutation`` (copied into the compiled greedy), so
the copies are those of the NumPy greedy that tests/unit/oracles.py keeps as its oracle,
copy for copy and in the same order, and the seeds of data/seeds.json stay the best found.
"""
from __future__ import annotations

import numpy as np

from .model import BLOCK_COPIES, CopyBlock

from . import _greedy

__all__ = ["copy_blocks", "copy_rounds"]


def copy_blocks(n: int, seed: int = 0):
    """Yield the copies of the canonical schedule (straggler n-1) as ``CopyBlock``s of
    consecutive rounds (round t < n-1 also holds the exchange of chunk t, implied)."""
    m = n - 1
    rng = np.random.default_rng(seed)
    state = _greedy.Greedy(m)
    size = max(1, BLOCK_COPIES // max(m, 1))
    t = 0
    while True:
        starts, src, dst, chunk = state.block(t, size, rng)
        if len(starts) > 1:
            yield CopyBlock(t, starts, src, dst, chunk)
        t += len(starts) - 1
        if len(starts) - 1 < size:
            return


def copy_rounds(n: int, seed: int = 0):
    """Yield the copies of each round of the canonical schedule (straggler n-1) as
    (src, dst, chunk) int64 arrays; round t < n-1 also holds the exchange of chunk t
    between early rank t and the straggler, which is implied."""
    return (cols for block in copy_blocks(n, seed) for cols in block.rounds())
