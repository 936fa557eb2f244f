"""Arrival at 16 ranks on 4 emulated nodes (a real mpiexec run, tests/perf/arrival_scale.py).

Every call is tracked (STRAGGLAR_TIMEOUT) and takes its roles by arrival, the last rank
80 ms late: each rank sends at most 12 arrival messages per call (its stats), the late
rank is the straggler in each of the last 10 of 20 calls, every result is right.  Then
a rank misses a call, in turn an aggregator (a forwarder of its group's notices), the
coordinator, another aggregator and a plain member: every other rank names it, and
only it, within the timeout (plus the naming's grace).  16 ranks on the 2-core CI
machine are heavily oversubscribed: the buffers are tiny and the whole launch is
bounded (about 40 s there).
"""
import sys

import pytest

import launcher
from test_examples import ROOT

SCRIPT = ROOT / "tests" / "perf" / "arrival_scale.py"
BOUND = 150


@pytest.mark.skipif(not launcher.emulates_nodes(), reason="this MPI cannot emulate nodes on one machine")
def test_arrival_at_16_ranks_on_4_nodes():
    env = {"MPIR_CVAR_NUM_CLIQUES": "4", "UCX_TLS": "tcp,self", "STRAGGLAR_TIMEOUT": "20"}
    rc, out, cmd = launcher.run(16, [sys.executable, str(SCRIPT), "--calls", "20", "--delay", "0.08",
                                     "--max-messages", "12", "--timeout", "1.5"],
                                BOUND, env=env, unset=["SMPI_TEST_IN_MPIEXEC"])
    lines = [line for line in out.splitlines() if line.startswith(("late:", "missing:"))]
    assert rc == 0, f"{' '.join(cmd)} exited {rc}:\n" + "\n".join(lines) + "\n" + out[-6000:]
    assert len(lines) == 5 and all(line.endswith("OK") for line in lines), "\n".join(lines)
    assert "straggler=15 in 10 of the last 10" in lines[0]
    assert "(groups)" in lines[0], lines[0]       # 16 ranks: STRAGGLAR_ARRIVAL_GROUPS by default
