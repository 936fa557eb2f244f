"""The per-round profile (``python -m stragglar_mpi.bench.rounds``, docs/BENCHMARKS.md) runs
under mpiexec and prints a timeline whose rounds receive what the plan sends after the
arrival (its stamps come from the compiled interpreter's round hook: ``end(round)``)."""
import re
import sys

import launcher


def test_the_round_profile_runs_and_counts_the_buffer_once_per_rank():
    argv = [sys.executable, "-m", "stragglar_mpi.bench.rounds", "-s", "256K", "--delay", "50",
            "-n", "2", "-a", "stragglar,rhd"]
    rc, out, cmd = launcher.run(3, argv, 120, unset=["SMPI_TEST_IN_MPIEXEC"])
    assert rc == 0, f"{' '.join(cmd)} exited {rc}:\n{out}"
    for algorithm in ("stragglar", "rhd"):
        head = re.search(rf"^{algorithm}, 3 ranks, 0.25 MiB: post-arrival median ([0-9.]+) ms; "
                         r"bytes received after the arrival, all ranks: ([0-9.]+) x the buffer", out, re.M)
        assert head, out
        # after the arrival every rank ends with the whole sum: at least (n-1)/n of the
        # buffer comes in per rank, and nothing of phase 1 is counted
        assert 2.0 <= float(head.group(2)) <= 6.0, head.group(0)
    rows = re.findall(r"^\s+(\d+)\s+[0-9.]+\s+[0-9.]+\s+(\d+)\s+[0-9.]+", out, re.M)
    assert rows and all(0 <= int(ranks) <= 3 for _, ranks in rows), out      # rounds before the arrival: 0
