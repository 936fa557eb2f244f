"""A rank that comes after the others gave up the call (issue 35).

4 ranks, STRAGGLAR_TIMEOUT, a warm-up call, then rank 1 late by more than the timeout:
ranks 0, 2, 3 raise ``StragglerTimeout`` naming rank 1; rank 1 raises ``Abandoned`` (a
``StragglerTimeout``) that says the others gave the call up, never ``Mismatch`` (it used
to take what the abandoned call left in flight for its own messages), and its receive
buffer is untouched.  Marked ``timeouts``: tests/test_mpi.py runs them at 4 ranks."""
import time

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Abandoned, Allreduce, Iallreduce, StragglerTimeout
from stragglar_mpi.core.errors import Mismatch
from helpers import TIMEOUT, env, timing_size

LATE, LATE_RANK = 3.5, 1
COUNT = 65536


def blocking(c, send, recv, **how):
    Allreduce(c, send, recv, **how)


def nonblocking(c, send, recv, **how):
    Iallreduce(c, send, recv, **how).Wait()


CASES = {
    "blocking-straggler-2": (blocking, dict(algorithm="stragglar", straggler=2)),
    "blocking-arrival": (blocking, dict(algorithm="stragglar", straggler="arrival")),
    "nonblocking-straggler-2": (nonblocking, dict(algorithm="stragglar", straggler=2)),
}


@pytest.mark.timeouts
@pytest.mark.parametrize("case", list(CASES))
def test_late_rank_after_the_others_gave_up(comm, case):
    timing_size(comm)
    call, how = CASES[case]
    rank = comm.Get_rank()
    c = comm.Dup()
    send = np.arange(COUNT, dtype=np.float64) + rank
    recv = np.full(COUNT, -1.0)
    err = None
    with env(STRAGGLAR_TIMEOUT=TIMEOUT):
        warm = np.zeros(COUNT)
        call(c, send, warm, **dict(how, straggler=3) if how.get("straggler") == 2 else how)
        want = np.empty(COUNT)
        MPI.Comm.Allreduce(comm, send, want)
        assert np.array_equal(warm, want)
        comm.Barrier()
        if rank == LATE_RANK:
            time.sleep(LATE)
        try:
            call(c, send, recv, **how)
        except (StragglerTimeout, Mismatch, RuntimeError, MPI.Exception) as exc:
            err = exc
    errors = comm.allgather(None if err is None else (type(err).__name__, str(err)))
    comm.Barrier()
    assert all(e is not None for e in errors), f"a rank completed the abandoned call: {errors}"
    if rank == LATE_RANK:
        assert isinstance(err, Abandoned), f"the late rank got {err!r}"
        assert "gave up" in str(err) or "given up" in str(err), str(err)
        assert "unusable" in str(err)
        assert err.gave_up and set(err.gave_up) <= {0, 2, 3}, err.gave_up
        assert err.missing == ()
        assert np.all(recv == -1.0), "the late rank took the abandoned call's messages for data"
    else:
        assert isinstance(err, StragglerTimeout) and not isinstance(err, Abandoned), repr(err)
        assert err.missing == (LATE_RANK,), str(err)
        assert f"rank(s) {LATE_RANK} did not arrive" in str(err)
