"""Phase 1 as transfers among the early ranks: proved symbolically (``verify_phase1``
runs the rounds on sets of contributions), and each rank's view is its slice of the whole."""
import pytest

from stragglar_mpi.schedule import ScheduleError, Transfer
from stragglar_mpi.schedule.algorithms import ALLREDUCE, REDUCE_TO_OWNERS, TABLE
from stragglar_mpi.schedule.phase1 import KINDS, rank_view, round_count, rounds


def verify_phase1(kind, n, straggler, per_round, chunks):
    """Raise ScheduleError unless ``per_round`` leaves what phase 2 expects: chunk c at
    early position c (``reduce_scatter``) or every chunk at every early rank
    (``allreduce``), reduced over every early rank exactly once; the straggler untouched."""
    early = [r for r in range(n) if r != straggler]
    full = sum(1 << r for r in early)
    state = {r: [1 << r] * chunks for r in early}
    for k, rnd in enumerate(per_round):
        before = {r: list(v) for r, v in state.items()}
        for t in rnd:
            if t.src not in state or t.dst not in state:
                raise ScheduleError(f"phase 1 round {k}: {t} involves the straggler or no rank")
            have, got = before[t.dst][t.chunk], before[t.src][t.chunk]
            if t.reduce:
                if have & got:
                    raise ScheduleError(f"phase 1 round {k}: {t} counts a contribution twice")
                state[t.dst][t.chunk] |= got
            elif got != full:
                raise ScheduleError(f"phase 1 round {k}: {t} copies an unfinished chunk")
            else:
                state[t.dst][t.chunk] = got
    for p, r in enumerate(early):
        wanted = range(chunks) if kind == ALLREDUCE else [p]
        for c in wanted:
            if state[r][c] != full:
                raise ScheduleError(f"after phase 1 rank {r} lacks contributions to chunk {c}")


def test_the_kinds_are_the_tables():
    assert set(KINDS) == {a.phase1 for a in TABLE} - {None, REDUCE_TO_OWNERS}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", list(range(2, 34)) + [64, 65])
def test_phase1_leaves_what_phase_2_expects(kind, n):
    for straggler in sorted({0, n // 2, n - 1}):
        verify_phase1(kind, n, straggler, rounds(kind, n, straggler), max(n - 1, 1))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 3, 4, 7, 16])
def test_rank_view_is_the_slice_of_the_whole(kind, n):
    straggler = n // 3
    whole = rounds(kind, n, straggler)
    for rank in range(n):
        chunks, mine = rank_view(kind, n, straggler, rank)
        assert chunks == max(n - 1, 1) and len(mine) == len(whole) == round_count(kind, n - 1)
        for k, rnd in enumerate(whole):
            assert set(mine[k]) == {t for t in rnd if rank in (t.src, t.dst)}


def test_the_check_rejects_broken_phases():
    n, s = 5, 4
    good = rounds("reduce_scatter", n, s)
    with pytest.raises(ScheduleError, match="lacks"):
        verify_phase1("reduce_scatter", n, s, good[:-1], n - 1)               # a round missing
    doubled = [list(r) for r in good]
    doubled[1].append(Transfer(2, 3, 1, True))
    with pytest.raises(ScheduleError, match="twice"):
        verify_phase1("reduce_scatter", n, s, good[:2] + [doubled[1]] + good[2:], n - 1)
    with pytest.raises(ScheduleError, match="unfinished"):
        verify_phase1("allreduce", n, s, [[Transfer(0, 1, 0)]], n - 1)
    with pytest.raises(ScheduleError, match="straggler"):
        verify_phase1("reduce_scatter", n, s, [[Transfer(4, 0, 0, True)]], n - 1)
