"""The model of staged StragglAR (device buffers, MPI not CUDA-aware), before and after."""
import math

import pytest

from stragglar_mpi.schedule.__main__ import main
from stragglar_mpi.schedule.staging import ARRIVAL_ALPHAS, staged

ALPHA, NET, COPY = 3e-6, 25e9, 50e9


@pytest.mark.parametrize("n", [4, 8, 16])
def test_phase_two_matches_the_closed_form(n):
    piece = 4 << 20
    m = staged(n, 64 << 20, piece, ALPHA, NET, COPY)
    steps = n - 2 + math.ceil(math.log2(n))
    assert m.phase2 == pytest.approx(steps * ALPHA + steps / (n - 1) * piece / NET)
    assert m.unhidden > m.phase2 and m.pieces == 16 and m.copy == pytest.approx(piece / COPY)


@pytest.mark.parametrize("size", [64 << 20, 1 << 30])
def test_the_pipeline_pays_phase_two_once_per_piece(size):
    m = staged(8, size, 4 << 20, ALPHA, NET, COPY)
    assert m.after == pytest.approx(2 * m.copy + m.pieces * m.phase2)     # network-bound here
    assert m.before == pytest.approx(2 * m.copy + m.phase2
                                     + (m.pieces - 1) * (ARRIVAL_ALPHAS * ALPHA + m.unhidden))
    assert m.after < m.ring < m.before      # today's staging lost to Ring; the pipeline wins


def test_a_slow_copy_bounds_the_pipeline():
    m = staged(8, 64 << 20, 4 << 20, ALPHA, NET, 1e9)
    assert m.copy > m.phase2
    assert m.after == pytest.approx(m.copy + m.phase2 + (m.pieces - 1) * m.copy + m.copy)


def test_one_piece_is_not_a_pipeline():
    m = staged(8, 1 << 20, 4 << 20, ALPHA, NET, COPY)
    assert m.pieces == 1 and m.before == m.after


def test_command_line(capsys):
    assert main(["staged", "--n", "8", "--size", "64MiB", "--piece", "4MiB"]) == 0
    out = capsys.readouterr().out
    assert "before" in out and "after" in out and "    8      16" in out
