"""`python -m stragglar_mpi trace DIR` and `timeline DIR`: the verdict on synthetic trace
directories (tests/unit/trace_files.py) and the picture's rows."""
import json
import os
import subprocess
import sys

import pytest

import trace_files
from stragglar_mpi.bench import trace
from stragglar_mpi.bench.trace import ranks_text


def verdict_of(case, tmp_path, capsys):
    """(exit status, stdout lines, stderr) of ``trace`` on the case's directory."""
    directory = trace_files.CASES[case](tmp_path / case)
    status = trace.main(str(directory))
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def test_all_agree(tmp_path, capsys):
    status, lines, _ = verdict_of("agree", tmp_path, capsys)
    assert status == 0
    assert lines == ["all 4 ranks agree: 30 calls on 1 communicator; last most often: rank 3 in "
                     "30 of 30 calls on MPI_COMM_WORLD (100%), p50 12.4 ms after the next-to-last"]


def test_a_rank_never_arrived(tmp_path, capsys):
    status, lines, _ = verdict_of("never_arrived", tmp_path, capsys)
    assert status == 1
    assert lines[0] == ("rank 2 never arrived at call 7 on MPI_COMM_WORLD (its last call there, 6, "
                        "returned 32.1 ms before the first rank arrived at 7)")
    assert ("ranks 0, 1 did not return from call 7 on MPI_COMM_WORLD (phase 1, stragglar, straggler 3, "
            "waiting on rank 2); waiting 30.00 s when written (timeout)") in lines
    assert any(line.startswith("rank 3 did not return from call 7") and "phase 2" in line for line in lines)


def test_a_rank_passed_another_count(tmp_path, capsys):
    status, lines, _ = verdict_of("other_count", tmp_path, capsys)
    assert status == 1
    assert lines[0] == ("rank 3 passed count 1000 float32 at call 8 on MPI_COMM_WORLD, "
                        "ranks 0-2 passed count 1048576 float32")
    assert lines[1] == ("ranks 0-3 failed in call 8 on MPI_COMM_WORLD (stragglar, straggler 3): "
                        "Mismatch: counts differ across ranks")


def test_a_rank_still_in_the_call_before(tmp_path, capsys):
    status, lines, _ = verdict_of("call_behind", tmp_path, capsys)
    assert status == 1
    assert lines[0] == ("rank 1 is a call behind on MPI_COMM_WORLD: still in call 6 (phase 2, stragglar, "
                        "straggler 3, waiting on rank 3) while ranks 0, 2, 3 are in call 7")
    assert "rank 1 did not return from call 6" in lines[1]


def test_a_rank_that_skipped_a_call(tmp_path, capsys):
    status, lines, _ = verdict_of("skipped", tmp_path, capsys)
    assert status == 1
    assert lines == ["rank 3 is a call behind on MPI_COMM_WORLD: it skipped call 5 "
                     "(its call 5 has the arguments of the others' call 6)"]


def test_a_missing_file(tmp_path, capsys):
    status, lines, _ = verdict_of("missing_file", tmp_path, capsys)
    assert status == 1
    assert lines == ["no file from rank 3: killed before it wrote?"]


def test_bad_version_names_the_file(tmp_path, capsys):
    status, lines, err = verdict_of("bad_version", tmp_path, capsys)
    assert status == 2 and lines == []
    assert "rank-00001.jsonl: trace format version 2; this stragglar_mpi reads version 1" in err


@pytest.mark.parametrize("content, words", [
    (None, "no trace files"),
    ("not json\n", "rank-00000.jsonl:1: not JSON"),
    (json.dumps({"format": "something else", "version": 1}) + "\n", "not a stragglar_mpi trace"),
])
def test_bad_input(tmp_path, capsys, content, words):
    if content is not None:
        (tmp_path / "rank-00000.jsonl").write_text(content)
    assert trace.main(str(tmp_path)) == 2
    assert words in capsys.readouterr().err


def test_the_ring_dropped_old_calls(tmp_path, capsys):
    """A rank whose ring kept fewer calls than its peers' is not 'never arrived' at the old ones."""
    recs = trace_files.calls(3, 12)
    recs[1] = recs[1][5:]
    trace.main(str(trace_files.write(tmp_path, recs)))
    assert capsys.readouterr().out.startswith("all 3 ranks agree: 12 calls")


def test_a_sub_communicator_names_world_ranks(tmp_path, capsys):
    """On a communicator of world ranks 1 and 3, its rank 1 is world rank 3."""
    comms = {"c0": {"name": "MPI_COMM_WORLD", "size": 4, "world_ranks": [0, 1, 2, 3]},
             "c1": {"name": "odd", "size": 2, "world_ranks": [1, 3]}}
    recs = trace_files.calls(4, 2)
    sub = trace_files.calls(2, 3, straggler=1)
    recs[1] += [dict(r, comm="c1") for r in sub[0]]
    recs[3] += [dict(r, comm="c1") for r in sub[1][:2]]
    headers = {r: trace_files.header(r, 4, written=200.0, comms=comms) for r in range(4)}
    assert trace.main(str(trace_files.write(tmp_path, recs, headers=headers))) == 1
    assert capsys.readouterr().out.startswith("rank 1 (world 3) never arrived at call 3 on odd")


def test_ranks_text():
    assert ranks_text([3]) == "rank 3"
    assert ranks_text([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7, 8"


def run_command(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "stragglar_mpi", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def test_the_command(tmp_path):
    proc = run_command("trace", str(trace_files.never_arrived(tmp_path)))
    assert proc.returncode == 1 and "rank 2 never arrived at call 7" in proc.stdout, proc.stderr
    for command in ("trace", "timeline"):
        assert "usage" in run_command(command, "--help").stdout


def test_timeline_without_matplotlib_says_what_to_install(tmp_path, capsys, monkeypatch):
    from stragglar_mpi.bench import timeline

    monkeypatch.setitem(sys.modules, "matplotlib", None)        # import matplotlib fails
    assert timeline.main(str(trace_files.agree(tmp_path / "t")), str(tmp_path / "t.png")) == 2
    assert "pip install stragglar_mpi[plot]" in capsys.readouterr().err


def test_no_matplotlib_at_import():
    code = ("import sys, stragglar_mpi, stragglar_mpi.__main__, stragglar_mpi.bench.trace, "
            "stragglar_mpi.bench.timeline; assert 'matplotlib' not in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
