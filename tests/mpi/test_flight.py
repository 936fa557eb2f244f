"""The flight recorder (call/flight.py): every call recorded with the same number on every
rank, whichever path runs it; and a native call under STRAGGLAR_TIMEOUT stays in C."""
import json
import os
import sys
import tempfile

import numpy as np
import pytest
from mpi4py import MPI

from helpers import assert_same_on_every_rank, env
from stragglar_mpi import Allreduce, Iallreduce, stats
from stragglar_mpi.call import flight
from stragglar_mpi.core.state import peek


def mine(comm):
    """This rank's records of ``comm``'s calls, oldest first."""
    ident = flight.comm_info(int(peek(comm).flight[0]))["ident"]
    return [r for r in flight.records() if r["comm"] == ident]


def test_every_call_is_recorded_alike_on_every_rank(comm):
    """Native calls from C, the Python path's algorithms and a nonblocking call: each is a
    record with the next number, its arguments, algorithm and times, the same on every rank."""
    x, y = np.ones(3, np.float32), np.empty(3, np.float32)
    Allreduce(comm, x, y)
    before = mine(comm)[-1]["seq"]
    for _ in range(3):
        Allreduce(comm, x, y, algorithm="native")         # repeats: the compiled entry's C path
    big = np.ones(1000)
    Allreduce(comm, MPI.IN_PLACE, big, algorithm="ring")
    Allreduce(comm, MPI.IN_PLACE, big, algorithm="stragglar", straggler=0)
    Iallreduce(comm, MPI.IN_PLACE, big, algorithm="ring").Wait()
    got = mine(comm)[-6:]
    assert [r["seq"] for r in got] == list(range(before + 1, before + 7)), got
    multi = comm.Get_size() > 1
    assert [r["algorithm"] for r in got] == ["native"] * 3 + (
        ["ring", "stragglar", "ring"] if multi else ["native"] * 3), got
    assert [(r["count"], r["dtype"], r["op"]) for r in got] == [(3, "float32", "SUM")] * 3 + [
        (1000, "float64", "SUM")] * 3, got
    for r in got:
        assert r["phase"] == "done" and r["exited"] >= r["arrived"] > 0, r
        assert r["rank"] == comm.Get_rank()
    if multi:
        assert got[4]["straggler"] == 0
    assert_same_on_every_rank(comm, [(r["seq"], r["algorithm"], r["count"]) for r in got], "the records")


def test_a_native_call_under_a_timeout_makes_no_python_call(world):
    """STRAGGLAR_TIMEOUT=600: a repeated 8-byte native call is one MPI_Iallreduce tested in C
    (no Python frame of the package runs), and it is recorded."""
    x, y = np.ones(1), np.empty(1)
    with env(STRAGGLAR_TIMEOUT=600):
        Allreduce(world, x, y, algorithm="native")            # the miss: binds it
        native = stats(world)["calls"].get("native", 0)
        events = []

        def note(frame, event, _arg):
            if event == "call" and "stragglar_mpi" in frame.f_code.co_filename:
                events.append(frame.f_code.co_name)
        sys.setprofile(note)
        try:
            for _ in range(5):
                Allreduce(world, x, y, algorithm="native")
        finally:
            sys.setprofile(None)
        assert events == [], events
        assert y[0] == world.Get_size()
        assert stats(world)["calls"]["native"] == native + 5
        assert [r["algorithm"] for r in mine(world)[-5:]] == ["native"] * 5


def test_the_trace_file_holds_the_records(world):
    """STRAGGLAR_TRACE: ``dump`` writes this rank's file, a header and one line a call."""
    folder = world.bcast(tempfile.mkdtemp() if world.Get_rank() == 0 else None, root=0)
    x = np.ones(4)
    with env(STRAGGLAR_TRACE=folder):
        Allreduce(world, MPI.IN_PLACE, x)
        path = flight.dump("exit")
    lines = [json.loads(line) for line in open(path)]
    assert os.path.basename(path) == f"rank-{MPI.COMM_WORLD.Get_rank():05d}.jsonl"
    head = lines[0]
    assert (head["format"], head["version"], head["rank"]) == ("stragglar_mpi trace", 1,
                                                                MPI.COMM_WORLD.Get_rank())
    last = lines[-1]
    assert last["comm"] in head["comms"] and last["count"] == 4 and last["phase"] == "done"
    assert head["comms"][last["comm"]]["size"] == world.Get_size()


@pytest.mark.parametrize("case", ["pending", "ran"])
def test_open_calls_are_the_ones_not_returned(world, case):
    """What the watchdog reads: a call is open until it returns."""
    x = np.ones(2)
    Allreduce(world, MPI.IN_PLACE, x)
    serial = int(flight.OPENED[0]) - 1
    open_now = {s for s, _ in flight.open_calls()}
    assert serial not in open_now
    if case == "pending":
        opened = flight.open_call(MPI.Wtime())
        assert opened in {s for s, _ in flight.open_calls()}
        flight.RING[opened % flight.CAPACITY]["phase"] = flight.DONE
        assert opened not in {s for s, _ in flight.open_calls()}
