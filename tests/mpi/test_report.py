"""The straggler report: from the arrival records of tracked calls, local, nothing for untracked ones."""
import io

import numpy as np
import pytest

from stragglar_mpi import Allreduce, report
from stragglar_mpi.core.state import peek
from helpers import last_to_arrive


def rows(text):
    """rank -> (last, p50 ms, p95 ms, StragglAR calls, saved ms) from a report's table."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[0].isdigit():
            out[int(parts[0])] = (int(parts[1]), float(parts[3]), float(parts[4]), int(parts[5]),
                                  float(parts[6]))
    return out


def test_the_late_rank_is_reported_last_and_late(comm):
    n = comm.Get_size()
    c = comm.Dup()
    try:
        late, calls = n - 1, 12
        for it in range(calls):
            c.Barrier()
            send = np.full(64, float(c.Get_rank()))
            recv = np.zeros(64)
            with last_to_arrive(c, late, 0.05):
                Allreduce(c, send, recv, algorithm="stragglar", straggler="arrival")
            assert np.all(recv == n * (n - 1) / 2)
        if c.Get_rank() == 0:                     # local: one rank alone, no hang
            text = report(c, file=io.StringIO())
            if n == 1:
                assert "0 recorded calls" in text
                return
            table = rows(text)
            assert sorted(table) == list(range(n))
            assert f"{calls - 1} recorded calls" in text      # the last call's record comes later
            assert "\nran: stragglar " in text                   # what the recorded calls ran
            last, p50, p95, ran, saved = table[late]
            assert last == calls - 1 and 10.0 <= p50 <= p95
            assert ran == last                  # StragglAR ran with it as the straggler
            assert sum(r[0] for r in table.values()) == calls - 1
            assert "saved in all" in text
        c.Barrier()
    finally:
        c.Free()


def test_untracked_calls_record_nothing(comm):
    c = comm.Dup()
    try:
        for _ in range(5):
            Allreduce(c, np.ones(8), np.zeros(8))          # auto below its size cut: native
        assert peek(c).log is None
        text = report(c, file=io.StringIO())
        assert "0 recorded calls" in text
    finally:
        c.Free()


@pytest.mark.every_comm
def test_report_before_any_call_is_empty_and_local(comm):
    c = comm.Dup()
    try:
        if c.Get_rank() == 0:
            assert "0 recorded calls" in report(c, file=io.StringIO())
            assert peek(c) is None
        c.Barrier()
    finally:
        c.Free()
