"""The straggler report: from the arrival records of tracked calls, every one from the
first, local, nothing for untracked ones."""
import io

import numpy as np
import pytest

from stragglar_mpi import Allreduce, report
from stragglar_mpi.core.state import peek
from helpers import last_to_arrive, really_late


def rows(text):
    """rank -> (share %, calls, p50 ms, p95 ms, calls, StragglAR calls, saved ms, basis) from
    a report's table (None for a figure shown as "-")."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 9 and parts[0].isdigit():
            number = [float(p.rstrip("%")) if p != "-" else None for p in parts[1:8]]
            out[int(parts[0])] = (*number, parts[8])
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
            assert f"{calls} recorded calls" in text      # the first and the last call included
            assert "\nran: stragglar " in text              # what the recorded calls ran
            share, recorded, p50, p95, last, ran, saved, basis = table[late]
            assert share == 100.0 and recorded == last == calls and 10.0 <= p50 <= p95
            assert ran == last and basis == "estimate"   # by name: auto measured nothing
            assert "saved in all" in text
        c.Barrier()
    finally:
        c.Free()


@pytest.mark.wallclock
def test_one_rank_late_by_50_ms_is_named_from_the_first_call(comm):
    """auto with its defaults, 16 MiB, one rank 50 ms late to each of 5 calls: every call
    is recorded (auto's timed runs too) and the late rank's lateness is within 20%."""
    n = comm.Get_size()
    if n == 1:
        pytest.skip("nobody is late alone")
    c = comm.Dup()
    try:
        send, recv = np.ones(4 << 20, np.float32), np.empty(4 << 20, np.float32)
        c.Barrier()
        for _ in range(5):
            really_late(c, 1, 0.05)
            Allreduce(c, send, recv)
            assert recv[0] == n and recv[-1] == n
        text = report(c, file=io.StringIO(), root=None)
        table = rows(text)
        assert "5 recorded calls" in text, text
        share, recorded, p50, p95, last, _, _, _ = table[1]
        assert max(table, key=lambda r: table[r][0]) == 1 and share >= 60.0, text
        assert recorded == 5 and last > 0 and 40.0 <= p50 <= 60.0, text
        saved = text[text.index("saved in all"):].splitlines()[1]
        assert saved.startswith("  16M") and (": measured, " in saved and "auto's median" in saved
                                              or ": estimate, " in saved and "STRAGGLAR_MODEL=" in saved), text
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
