"""Staged StragglAR (device buffers, MPI not CUDA-aware): which chunks the staged call
copies before and after each round (run/staged.py)."""
from stragglar_mpi.schedule import build, rank_view


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
