"""StragglAR phase-2 schedules for every n.

Labels: the straggler S is rank n-1 and early rank i owns chunk i after the
ReduceScatter of phase 1.  Round r < n-1 always holds the exchange of chunk r
between S and rank r (both reduce); every other transfer copies a fully
reduced chunk.  ``synthesize`` relabels for any other straggler.

Three constructions, each in its module; this one picks the construction for n, caches
and relabels it, and slices it per rank: the field form for powers of two (``field.py``,
a proof, O(1) per rank and round); the augmenting greedy (``augmenting.py``) with its
stored seeds up to ``AUGMENTING_MAX``; the greedy (``greedy.py``, compiled) above it,
checked round by round as it is produced.
"""
from __future__ import annotations

import functools
import json
import time
from importlib import resources

from .algorithms import STRAGGLAR
from .augmenting import greedy_rounds
from .field import exchange, field_rank_rounds, field_round_arrays, field_rounds
from .model import Schedule, ScheduleError, Transfer, gc_paused

__all__ = ["synthesize", "lower_bound_rounds", "rank_rounds", "copy_blocks", "copy_columns"]

#: Up to this n (not a power of two) the augmenting greedy builds the schedule, with the
#: seeds of data/seeds.json; above it the greedy of greedy.py (compiled) (about n^2 log n
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
        rounds = field_rounds(n)
    elif n <= AUGMENTING_MAX:
        rounds = _as_transfers(greedy_rounds(n, _seeds().get(n, 0)), n - 1)
    else:
        rounds = _as_transfers((zip(*(col.tolist() for col in cols))
                                for cols in _greedy_rounds(n)), n - 1)
    return Schedule(STRAGGLAR, n, n - 1, n - 1, rounds)


def _is_field(n: int) -> bool:
    return n > 2 and n & (n - 1) == 0


def _greedy_rounds(n: int):
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
        return _greedy_rounds(n)
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
        return field_rank_rounds(n, label)
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
    mine = [list(exchange(t, m, t)) if t < m and u in (t, m) else [] for t in range(count)]
    with gc_paused():
        for side in (src, dst):
            ours = side == u
            for t, s, d, c in zip(*(col[ours].tolist() for col in (rounds, src, dst, chunk))):
                mine[t].append(Transfer(s, d, c))
        return tuple(map(tuple, mine))


def _as_transfers(copies_per_round, m: int) -> list[tuple[Transfer, ...]]:
    return [
        (exchange(t, m, t) if t < m else ()) + tuple(Transfer(*copy) for copy in copies)
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
    best = (0, len(greedy_rounds(n, 0)))
    for seed in range(1, tries):
        if best[1] == lower_bound_rounds(n) or time.monotonic() > deadline:
            break
        rounds = greedy_rounds(n, seed, give_up=best[1] - 1)
        if rounds is not None:
            best = (seed, len(rounds))
    return best


def verify_canonical(n: int) -> int:
    """Verify the canonical StragglAR schedule (straggler n-1) of any n; its rounds.

    Checked as copy columns round by round (``checked_copy_blocks``): the field form
    and the greedy never build ``Transfer`` objects, so this is O(n^2) time and
    n^2 bytes of state whatever n.
    """
    from .verify import check_stragglar_blocks, verify
    if n <= 2:
        return len(verify(synthesize(n)).rounds)
    return check_stragglar_blocks(n, copy_blocks(n))
