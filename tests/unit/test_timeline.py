"""`python -m stragglar_mpi timeline DIR`: the picture of a synthetic trace (tests/unit/trace_files.py)
is a PNG with a row per rank.  Skipped only without matplotlib (the plot extra)."""
import pytest

import trace_files
from stragglar_mpi.bench import trace
from test_trace import run_command

pytest.importorskip("matplotlib", reason="the timeline needs the plot extra (pip install stragglar_mpi[plot])")


def test_timeline(tmp_path):
    from stragglar_mpi.bench import timeline

    drawing = timeline.draw(trace.read(str(trace_files.never_arrived(tmp_path / "t"))),
                            str(tmp_path / "t.png"), calls=(3, None))
    assert drawing.rows == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert drawing.seqs == [3, 4, 5, 6, 7] and drawing.open_calls == 3
    with open(drawing.path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert phase1_bands(drawing.path) == 3          # rank 3, the straggler, has no phase 1


def phase1_bands(path) -> int:
    """How many separate horizontal bands of phase 1's colour the picture has: one per rank
    whose calls had a phase 1."""
    import matplotlib.image
    import numpy as np

    from stragglar_mpi.bench.timeline import STYLE

    pixels = matplotlib.image.imread(path)[..., :3]
    pixels = pixels[:, :int(0.7 * pixels.shape[1])]          # the calls, not the legend at the right
    colour = np.array([int(STYLE["phase 1"][0][i:i + 2], 16) / 255 for i in (1, 3, 5)])
    rows = (np.abs(pixels - colour).max(axis=2) < 0.02).sum(axis=1) > 20
    return int(np.sum(rows[1:] & ~rows[:-1]) + rows[0])


def test_timeline_command(tmp_path):
    out = tmp_path / "timeline.png"
    proc = run_command("timeline", str(trace_files.agree(tmp_path / "t")), "-o", str(out), "--calls", "25:")
    assert proc.returncode == 0 and "4 ranks, calls 25-30" in proc.stdout, proc.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"
    bad = run_command("timeline", str(tmp_path / "t"), "--calls", "9:3")
    assert bad.returncode == 2 and "--calls wants FIRST:LAST" in bad.stderr
