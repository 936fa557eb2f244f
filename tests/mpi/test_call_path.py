"""The call's spine stays short: how many Python-level calls a repeated Allreduce makes.

Counted as docs/ARCHITECTURE.md says: the 10th of 10 calls, each after a Barrier, with
``sys.setprofile``; every "call" event whose code is in the package counts (a generator's
resume is one too); the maximum over the ranks.  Files: the package's Python files that
those events ran in (the compiled entry and interpreter run no Python frames).  The
budgets are issue 47's, at 3 ranks (the arrival notices grow with the ranks).
"""
import os
import sys

import numpy as np
import pytest
from mpi4py import MPI

import stragglar_mpi
from stragglar_mpi import Allreduce

PACKAGE = os.path.dirname(stragglar_mpi.__file__)

#: (algorithm, straggler, bytes) -> (most calls, most files)
BUDGETS = {
    ("stragglar", 1, 256 << 10): (20, 6),
    ("stragglar", "arrival", 256 << 10): (40, None),
    ("auto", None, 16 << 20): (60, None),
}


def profiled(comm, x, y, **kwargs):
    """The package's Python call events of the 10th call, and their files, on this rank."""
    events = []

    def note(frame, event, _arg):
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            events.append((os.path.relpath(frame.f_code.co_filename, PACKAGE), frame.f_code.co_name))
    for i in range(10):
        comm.Barrier()
        if i == 9:
            sys.setprofile(note)
        try:
            Allreduce(comm, x, y, MPI.SUM, **kwargs)
        finally:
            sys.setprofile(None)
    return events


@pytest.mark.parametrize("algorithm,straggler,nbytes", list(BUDGETS), ids=["fixed", "arrival", "auto"])
def test_a_repeated_call_stays_within_its_budget(world, algorithm, straggler, nbytes):
    if world.Get_size() != 3:
        pytest.skip("the budgets are for 3 ranks")
    comm = world.Dup()
    try:
        x = np.ones(nbytes // 4, np.float32)
        y = np.empty_like(x)
        kwargs = {"algorithm": algorithm} if straggler is None else {"algorithm": algorithm, "straggler": straggler}
        events = profiled(comm, x, y, **kwargs)
        assert np.all(y == 3)
        calls = comm.allreduce(len(events), MPI.MAX)
        files = comm.allreduce(len({f for f, _ in events}), MPI.MAX)
    finally:
        comm.Free()
    most_calls, most_files = BUDGETS[(algorithm, straggler, nbytes)]
    where = sorted({f"{f}:{name}" for f, name in events})
    assert calls <= most_calls, f"{calls} calls (budget {most_calls}): {where}"
    if most_files is not None:
        assert files <= most_files, f"{files} files (budget {most_files}): {sorted({f for f, _ in events})}"


def test_the_count_sees_the_python_path(world):
    """The profile counts what it should: a call the entry cannot bind (an unbuffered
    spec it leaves to the checks) runs the full Python checks, many more calls."""
    comm = world.Dup()
    try:
        x = np.ones(64, np.float64)
        events = []

        def note(frame, event, _arg):
            if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
                events.append(frame.f_code.co_name)
        sys.setprofile(note)
        try:
            Allreduce(comm, MPI.IN_PLACE, [x, MPI.DOUBLE], algorithm="ring", straggler=0)
        finally:
            sys.setprofile(None)
    finally:
        comm.Free()
    assert "check" in events and len(events) > 20
