"""Staged StragglAR (device buffers, MPI not CUDA-aware): the model, before and after,
and which chunks the staged call copies before and after each round."""
import math

import pytest

from stragglar_mpi.schedule import build, rank_view
from stragglar_mpi.schedule.__main__ import main
from stragglar_mpi.schedule.staging import ARRIVAL_ALPHAS, staged

ALPHA, NET, COPY = 3e-6, 25e9, 50e9


@pytest.mark.parametrize("n", [4, 8, 16])
def test_phase_two_matches_the_closed_form(n):
    size = 64 << 20
    m = staged(n, size, 4 << 20, ALPHA, NET, COPY)
    steps = n - 2 + math.ceil(math.log2(n))
    assert m.phase2 == pytest.approx(steps * ALPHA + steps / (n - 1) * size / NET, rel=1e-6)
    assert m.after == pytest.approx(m.phase2 + 2 * m.copy / (n - 1))    # the rounds are slower than copies


@pytest.mark.parametrize("size", [64 << 20, 1 << 30])
def test_staging_no_longer_loses_to_ring(size):
    m = staged(8, size, 4 << 20, ALPHA, NET, COPY)
    assert m.pieces == size // (4 << 20)
    assert m.after < m.ring < m.before      # the old pieces lost to Ring; the plan over the host copy wins


def test_before_pays_each_piece_without_its_delay():
    m = staged(8, 64 << 20, 4 << 20, ALPHA, NET, COPY)
    piece = staged(8, 4 << 20, 4 << 20, ALPHA, NET, COPY)
    assert m.before > 15 * ARRIVAL_ALPHAS * ALPHA + piece.phase2 * 16


def test_slow_copies_bound_the_pipeline():
    m = staged(8, 64 << 20, 4 << 20, ALPHA, NET, 1e9)
    assert m.copy > m.phase2 and m.after == pytest.approx(m.copy * (1 + 1 / 7))


def test_command_line(capsys):
    assert main(["staged", "--n", "8", "--size", "64MiB", "--piece", "4MiB"]) == 0
    out = capsys.readouterr().out
    assert "before" in out and "after" in out and "    8      16" in out


def test_the_straggler_copies_in_chunk_by_chunk_and_out_as_chunks_finish():
    from stragglar_mpi.run.plan import compile_rounds
    from stragglar_mpi.run.staged import _reads_and_last_writes
    from stragglar_mpi.schedule import chunk_bounds
    n, count, extent = 8, 7 * 100, 8
    chunks, rounds = rank_view("stragglar", n, n - 1, n - 1)
    plan = compile_rounds(rounds, chunks, n - 1, count, extent, False, True)
    spans = [(o * extent, k * extent) for o, k in chunk_bounds(count, chunks)]
    needs, final = _reads_and_last_writes(plan.rows, spans, extent)
    assert [needs[r] for r in range(n - 1)] == [[r] for r in range(n - 1)]   # round r: its chunk r
    assert final == list(range(n - 1))          # chunk r is final on the straggler after round r
    assert len(build("stragglar", n).rounds) > max(final) + 1   # so copies out overlap later rounds
