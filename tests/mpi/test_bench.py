"""The benchmark end to end on a tiny sweep, in-process on ``comm`` (every rank of it runs it)."""
import json
import os
import shutil
import tempfile

import pytest
from mpi4py import MPI

from stragglar_mpi.bench import _args, main

ALL = ["native", "native2", "ring", "rhd", "stragglar", "auto", "bound"]


@pytest.fixture
def json_path(comm):
    """One file name for every rank (only rank 0 writes); pytest's tmp_path differs per rank."""
    folder = comm.bcast(tempfile.mkdtemp(prefix="smpi-bench-") if comm.Get_rank() == 0 else None)
    yield os.path.join(folder, "bench.json")
    comm.Barrier()
    if comm.Get_rank() == 0:
        shutil.rmtree(folder, ignore_errors=True)


def _run(comm, out, *flags):
    if comm.Get_size() < 2:
        assert main(["-q"], comm) == 2      # refused: nobody to reduce with
        pytest.skip("the benchmark needs 2 ranks")
    argv = ["-n", "2", "-w", "0", "--alpha", "5", "--bandwidth", "5", "--json", out, "-q", *flags]
    assert main(argv, comm) == 0
    if comm.Get_rank() != 0:
        return None
    with open(out) as f:
        doc = json.load(f)
    assert doc["config"]["ranks"] == comm.Get_size()
    for r in doc["results"]:
        assert r["wrong"] == (None if r["algorithm"] == "bound" else 0), r
        p = r["post_arrival"]
        assert r["iters"] == 2 and 0 <= p["min"] <= p["median"] <= p["max"] <= r["total"]["max"]
        assert r["model"] > 0 and r["busbw"] >= r["algbw"] > 0
    return doc["results"]


def test_every_algorithm_random_straggler(comm, json_path):
    rows = _run(comm, json_path, "-b", "4K", "-e", "8K", "--delay", "1", "--straggler", "random",
                "-a", ",".join(ALL[:-1]), "--check", "all")
    if rows is not None:
        assert {(r["size"], r["algorithm"]) for r in rows} == {(s, a) for s in (4096, 8192) for a in ALL}


def test_no_straggler(comm, json_path):
    rows = _run(comm, json_path, "-b", "1000", "-e", "1000", "--delay", "0", "--straggler", "none",
                "-a", "stragglar", "-d", "int32", "-o", "max")
    if rows is not None:
        assert [r["algorithm"] for r in rows] == ["stragglar", "bound"]
        assert all(r["delay"] == 0 for r in rows)


@pytest.mark.parametrize("flags, words", [
    (["-b", "1M", "-e", "64K"], "larger than -e/--maxbytes"),
    (["--json", "/nonexistent/dir/x.json"], "does not exist"),
    (["--scenario", "moving", "--straggler", "0"], "not both"),
    (["--straggler", "99"], "is not a rank"),
])
def test_bad_command_lines_are_refused_before_any_work(comm, capsys, flags, words):
    """Every rank returns 2 at once; rank 0 says why (no sweep, no traceback)."""
    if comm.Get_size() < 2:
        pytest.skip("the benchmark needs 2 ranks")
    assert main(flags + ["-q"], comm) == 2
    if comm.Get_rank() == 0:
        assert words in capsys.readouterr().err


@pytest.mark.every_comm
def test_plot_without_matplotlib_names_the_extra(comm, capsys, monkeypatch):
    if comm.Get_size() < 2:
        pytest.skip("the benchmark needs 2 ranks")
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # as if it were not installed
    assert main(["--plot", "out.png", "-q"], comm) == 2
    if comm.Get_rank() == 0:
        assert 'pip install "stragglar_mpi[plot]"' in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["-n", "0"], ["-f", "0"], ["--min-iters", "-1"], ["--bandwidth", "0"],
                                   ["--alpha", "nan"], ["-b", "12Q"]])
def test_bad_values_are_argparse_errors(flags, capsys):
    with pytest.raises(SystemExit) as info:
        _args.parser().parse_args(flags)
    assert info.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_help_works(capsys):
    with pytest.raises(SystemExit) as info:
        _args.parser().parse_args(["--help"])
    assert info.value.code == 0
    assert "--scenario" in capsys.readouterr().out


def test_scenario_keeps_explicit_roles(comm):
    args = _args.parser().parse_args(["--scenario", "moving", "--roles", "predict"])
    _args._apply_scenario(args, 4)
    assert args.roles == "predict" and args.straggler == "random"
    args = _args.parser().parse_args(["--scenario", "moving"])
    _args._apply_scenario(args, 4)
    assert args.roles == "arrival"


def test_native_compositions_and_hring_side_by_side(comm, json_path):
    """native-comp1/-comp4 (MPICH's SMP-aware compositions set through MPI_T for their call
    only) and hring in one run; refused with the reason where the MPI lacks the variable."""
    from stragglar_mpi.bench import _cvar
    level = MPI.Query_thread()
    why = _cvar.problem("native-comp1")
    assert MPI.Query_thread() == level        # MPI_T left the MPI's thread level as it was
    if comm.Get_size() < 2:
        pytest.skip("the benchmark needs 2 ranks")
    argv = ["-n", "2", "-w", "0", "--alpha", "5", "--bandwidth", "5", "--json", json_path, "-q",
            "-b", "64K", "-e", "64K", "--delay", "1", "--check", "all",
            "-a", "native,native-comp1,native-comp4,hring"]
    if why is not None:
        assert "MPIR_CVAR_ALLREDUCE_COMPOSITION" in why
        assert main(argv, comm) == 2         # refused on every rank: the test on this MPI
        return
    before = _cvar.Cvar.open(_cvar.COMPOSITION).read()
    assert main(argv, comm) == 0
    assert _cvar.Cvar.open(_cvar.COMPOSITION).read() == before      # put back after each call
    with _cvar.setting("native-comp4"):
        assert _cvar.Cvar.open(_cvar.COMPOSITION).read() == 4
    assert _cvar.Cvar.open(_cvar.COMPOSITION).read() == before
    assert MPI.Query_thread() == level        # MPI_T left the MPI's thread level as it was
    if comm.Get_rank() != 0:
        return
    with open(json_path) as f:
        rows = json.load(f)["results"]
    assert {r["algorithm"] for r in rows} == {"native", "native-comp1", "native-comp4", "hring",
                                              "bound"}
    assert all(r["wrong"] in (None, 0) for r in rows), rows


def test_the_header_names_the_mpi(comm, json_path, capsys):
    """The first line says which MPI library ran (the four of docs/MPIS.md differ)."""
    _run(comm, json_path, "-b", "4K", "-e", "4K", "--delay", "1", "-a", "native")
    if comm.Get_rank() == 0:
        library = " ".join(MPI.Get_library_version().replace("\0", " ").split("\n")[0].split())
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith("# stragglar_mpi.bench ") and library in first, first
