"""The performance scripts in tests/perf still run (tiny sizes; their figures are not checked here)."""
import pytest

from test_examples import ROOT, run_script

PERF = ROOT / "tests" / "perf"


@pytest.mark.parametrize("script,args,expect", [
    ("bench_entry.py", ["--sizes", "8,4K", "--calls", "5", "--rounds", "2"], "[buf, (count, displ), dt]"),
    ("bench_entry.py", ["--omb", "--max-size", "64", "--iters", "5", "--skip", "2", "--reps", "1"],
     "Comm/native"),
    ("bench_auto.py", ["--size", "64K", "--iters", "3", "--delay-ms", "1"], "native/native2"),
    ("bench_transport.py", ["--iters", "1"], "16777216"),
    ("bench_validate.py", ["--size", "64K", "--iters", "3"], "median call"),
    ("bench_arrival.py", ["--iters", "3"], "roles"),
    ("bench_arrival.py", ["--compare", "--iters", "3"], "groups / notices"),
    ("auto_late_rank.py", ["--size", "64K", "--calls", "3", "--delay-ms", "1"], "StragglAR in the last 10"),
    ("bench_overlap.py", ["--size", "64K", "--delays", "5", "--iters", "1"], "ratio"),
    ("soak.py", ["--calls", "40", "--warmup", "10", "--max-bytes", "64K"], "errors 0"),
    ("stress_nonblocking.py", ["--rounds", "3", "--limit", "120"], "errors 0"),
])
def test_perf_script_runs(script, args, expect):
    assert expect in run_script(2, PERF / script, *args)


def test_bench_schedule_runs():
    out = run_script(1, PERF / "bench_schedule.py", "--quick")
    assert "peak bytes of one rank's plan n=64" in out
    assert "rounds == n-2+ceil(log2 n) for 16 of 16 n" in out
