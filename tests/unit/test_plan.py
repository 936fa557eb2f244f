"""Per-rank plans, run for all ranks in one process with NumPy standing in for MPI.

This checks the compiler (buffers, scratch slots, message matching, operand
order) for many n without starting MPI processes.
"""
import numpy as np
import pytest

from stragglar_mpi.run.plan import (
    COPY, IN, OUT, RECV, REDUCE, SCRATCH, SEND, compile_rounds)
from stragglar_mpi.schedule import PHASE1, build, chunk_bounds, rank_view


def compile_plan(schedule, rank, *args):
    """The plan of ``rank`` from the whole schedule (the library compiles a rank's slice)."""
    return compile_rounds(schedule.rounds, schedule.chunks, rank, *args)


def ordered_sub(a, b):
    # A deliberately non-commutative combine: inout = in - inout.
    return a - b


def run_all(algorithm, n, count, in_place, commutative, straggler=None, combine=np.add,
            by_view=False):
    schedule = build(algorithm, n, straggler)
    inputs = [np.arange(count, dtype=np.float64) * (r + 1) + r for r in range(n)]
    bufs = []
    plans = []
    for rank in range(n):
        out = inputs[rank].copy() if in_place else np.full(count, np.nan)
        prepared = _phase1(schedule, rank, inputs, out, count)
        if by_view:   # the library's path: this rank's slice only, relabelled for the straggler
            chunks, rounds = rank_view(algorithm, n, straggler, rank)
            plan = compile_rounds(rounds, chunks, rank, count, 8, in_place, commutative, prepared)
        else:
            plan = compile_plan(schedule, rank, count, 8, in_place, commutative, prepared)
        src = out if in_place else inputs[rank].copy()
        bufs.append([src.view(np.uint8), out.view(np.uint8),
                     np.zeros(max(plan.scratch_bytes, 1), np.uint8)])
        plans.append(plan)
    _lockstep(plans, bufs, len(schedule.rounds), combine)
    return [b[OUT].view(np.float64) for b in bufs], inputs


def _phase1(schedule, rank, inputs, out, count):
    kind = PHASE1.get(schedule.algorithm)
    if kind is None or rank == schedule.straggler:
        return frozenset()
    early = schedule.early
    total = sum(inputs[r] for r in early)
    if kind == "allreduce":
        out[:] = total
        return frozenset(range(schedule.chunks))
    c = early.index(rank)
    off, length = chunk_bounds(count, schedule.chunks)[c]
    out[off:off + length] = total[off:off + length]
    return frozenset([c])


def _lockstep(plans, bufs, nrounds, combine):
    for rnd in range(nrounds):
        rows = [[r for r in p.rows.tolist() if r[1] == rnd] for p in plans]
        mailbox = {}
        for rank, mine in enumerate(rows):
            for kind, _, peer, buf, off, count, _, _ in mine:
                if kind == SEND:
                    data = bufs[rank][buf][off:off + count * 8].copy()
                    mailbox.setdefault((rank, peer), []).append(data)
        for rank, mine in enumerate(rows):
            for kind, _, peer, buf, off, count, _, _ in mine:
                if kind == RECV:
                    data = mailbox[(peer, rank)].pop(0)
                    assert data.size == count * 8, "message size mismatch"
                    bufs[rank][buf][off:off + data.size] = data
        assert all(not v for v in mailbox.values()), "unmatched sends"
        for rank, mine in enumerate(rows):
            for kind, _, _, buf, off, count, buf2, off2 in mine:
                a = bufs[rank][buf][off:off + count * 8].view(np.float64)
                b = bufs[rank][buf2][off2:off2 + count * 8].view(np.float64)
                if kind == REDUCE:
                    b[:] = combine(a, b)
                elif kind == COPY:
                    b[:] = a


@pytest.mark.parametrize("algorithm", ["stragglar", "ring", "rhd", "direct"])
@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 12, 13])
@pytest.mark.parametrize("in_place", [False, True])
def test_plans_compute_the_sum(algorithm, n, in_place):
    for count in (1, n - 1, 3 * n + 1):
        outs, inputs = run_all(algorithm, n, count, in_place, commutative=True)
        want = sum(inputs)
        for rank, out in enumerate(outs):
            np.testing.assert_array_equal(out, want, err_msg=f"rank {rank} count {count}")


@pytest.mark.parametrize("algorithm", ["stragglar", "direct"])
@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("in_place", [False, True])
def test_ordered_reduction_gives_identical_results_at_both_ends(algorithm, n, in_place):
    # With a non-commutative combine, both ends of every exchange must still agree.
    outs, _ = run_all(algorithm, n, 2 * n, in_place, commutative=False, combine=ordered_sub)
    for out in outs[1:]:
        assert out.tobytes() == outs[0].tobytes()


def test_plan_shape_for_the_paper_example():
    plan = compile_plan(build("stragglar", 4), 3, 6, 8, False, True, frozenset())
    kinds = [row[0] for row in plan.rows.tolist()]
    assert kinds.count(SEND) == 4 and kinds.count(RECV) == 3 and kinds.count(REDUCE) == 3
    assert plan.max_requests == 2


def test_rhd_sends_one_message_per_peer_and_round():
    plan = compile_plan(build("rhd", 8), 0, 64, 8, False, True, frozenset())
    sends = [row for row in plan.rows.tolist() if row[0] == SEND]
    assert len(sends) == 6   # 3 halving + 3 doubling rounds, chunks coalesced
    assert {row[3] for row in plan.rows.tolist() if row[0] == RECV} <= {OUT, SCRATCH}
    assert IN in {row[3] for row in sends}


@pytest.mark.parametrize("algorithm", ["stragglar", "ring", "rhd", "direct"])
@pytest.mark.parametrize("n", [2, 5, 8, 13, 16, 32])
def test_rank_plan_is_the_whole_schedules_plan(algorithm, n):
    for straggler in sorted({0, n // 2, n - 1}):
        whole = build(algorithm, n, straggler)
        for rank in range(n):
            prepared = _phase1(whole, rank, [np.zeros(9)] * n, np.zeros(9), 9)
            chunks, rounds = rank_view(algorithm, n, straggler, rank)
            mine = compile_rounds(rounds, chunks, rank, 9, 4, False, False, prepared)
            ref = compile_plan(whole, rank, 9, 4, False, False, prepared)
            assert np.array_equal(mine.rows, ref.rows), (straggler, rank)
            assert (mine.scratch_bytes, mine.max_requests) == (ref.scratch_bytes, ref.max_requests)


@pytest.mark.parametrize("n", [3, 4, 7, 8, 16])
def test_plans_of_rank_views_compute_the_sum_for_any_straggler(n):
    for straggler in range(n):
        for algorithm, commutative, combine in (("stragglar", True, np.add),
                                                ("stragglar", False, ordered_sub),
                                                ("direct", True, np.add)):
            outs, inputs = run_all(algorithm, n, 2 * n + 1, False, commutative, straggler,
                                   combine, by_view=True)
            for out in outs[1:]:
                assert out.tobytes() == outs[0].tobytes()
            if combine is np.add:
                np.testing.assert_array_equal(outs[0], sum(inputs))


def test_a_new_straggler_compiles_one_ranks_rounds_only():
    from stragglar_mpi.schedule import stragglar
    stragglar._canonical.cache_clear()
    for straggler in (0, 100, 511):
        chunks, rounds = rank_view("stragglar", 512, straggler, 7)
        plan = compile_rounds(rounds, chunks, 7, 10_000, 4, False, True, frozenset([7 - (7 > straggler)]))
        assert len(rounds) == 519 and plan.rows.shape[0] < 4 * 519
    assert stragglar._canonical.cache_info().currsize == 0   # no whole schedule was built
