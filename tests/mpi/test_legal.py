"""Legal programs that once went wrong (issue 35): each is run REPEAT times in a row and
must give the right answer on every rank, the same everywhere.

- Cancel of a nonblocking Allreduce, queued on some ranks and started on others;
- auto's agreement (a collective on the private duplicate) after a small nonblocking
  native, with the progress thread held before it posts that native;
- configure() between Iallreduce and Wait (STRAGGLAR_VALIDATE, STRAGGLAR_TIMEOUT);
- persistent requests as mpi4py's: bool, Startall over ours and mpi4py's;
- derived datatypes freed by the caller while the operation is pending.
Expected values come from formulas, so every test passes at any world size."""
import time

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, Allreduce_init, Iallreduce, configure, stats
from stragglar_mpi.call.requests import Prequest
from stragglar_mpi.run.engine import ENGINE
from helpers import assert_same_on_every_rank, env

REPEAT = 20


@pytest.fixture
def held():
    """``held(rank, seconds)``: that rank's progress thread sleeps before it starts each
    operation (the test hook in run/engine.py)."""
    def hold(rank, seconds):
        if MPI.COMM_WORLD.Get_rank() == rank:
            ENGINE.delay = lambda point, op: time.sleep(seconds) if point == "start" else None
    yield hold
    ENGINE.delay = None


def test_cancel_has_one_outcome_on_every_rank(comm):
    """9 Iallreduce on one communicator (its lanes reused), the last rank late, every rank
    cancels op 5 at the same point: every op gives its sum, none is cancelled."""
    n, rank = comm.Get_size(), comm.Get_rank()
    for rep in range(REPEAT):
        work = comm.Dup()
        if rank == n - 1:
            time.sleep(0.01)
        bufs = [np.full(1000, float(1000 * k + rank + rep)) for k in range(9)]
        requests = [Iallreduce(work, MPI.IN_PLACE, b, algorithm="stragglar") for b in bufs]
        requests[4].Cancel()
        statuses = [MPI.Status() for _ in requests]
        MPI.Request.Waitall(requests, statuses)
        want = [n * (1000 * k + rep) + n * (n - 1) / 2 for k in range(9)]
        assert [float(b[0]) for b in bufs] == want and all(np.all(b == b[0]) for b in bufs)
        assert_same_on_every_rank(comm, [s.Is_cancelled() for s in statuses], "the cancelled flags")
        assert not any(s.Is_cancelled() for s in statuses)
        work.Free()


def test_agreement_waits_for_the_nonblocking_natives(comm, held):
    """A small Iallreduce (auto below its cut: native on the private duplicate), then a
    blocking auto Allreduce above the cut, over and over: auto's measuring rounds end in
    an agreement (a collective on the same duplicate).  Rank 0's progress thread waits
    before it posts each small one, so an agreement that did not wait for its turn
    would meet it: wrong sums, and ranks agreeing on different figures."""
    n, rank = comm.Get_size(), comm.Get_rank()
    held(0, 0.01)
    with env(STRAGGLAR_AUTO_MIN_BYTES=4096):
        work = comm.Dup()
        for rep in range(REPEAT):
            small = np.full(8, float(rank + rep))
            request = Iallreduce(work, MPI.IN_PLACE, small)
            big = np.full(1024, float(rank + 2 * rep))
            Allreduce(work, MPI.IN_PLACE, big)
            request.Wait()
            assert np.all(small == n * rep + n * (n - 1) / 2), (rep, small[:2])
            assert np.all(big == 2 * n * rep + n * (n - 1) / 2), (rep, big[:2])
        assert_same_on_every_rank(comm, sorted(stats(work)["calls"].items()), "the calls by algorithm")
        work.Free()


@pytest.mark.parametrize("knob", ["STRAGGLAR_VALIDATE", "STRAGGLAR_TIMEOUT"])
def test_configure_between_start_and_wait(comm, knob):
    """Iallreduce x5 with a late rank under a setting, configure() without it on every
    rank, then Wait: each operation runs as it was called (settings, deadline, tracking)."""
    n, rank = comm.Get_size(), comm.Get_rank()
    on = {"STRAGGLAR_VALIDATE": "1", "STRAGGLAR_TIMEOUT": "30"}[knob]
    work = comm.Dup()
    for rep in range(REPEAT):
        with env(**{knob: on}):
            if rank == n - 1:
                time.sleep(0.01)
            bufs = [np.full(500, float(rank + k + rep)) for k in range(5)]
            requests = [Iallreduce(work, MPI.IN_PLACE, b) for b in bufs]
        MPI.Request.Waitall(requests)         # the settings are back as they were: configure()d
        for k, b in enumerate(bufs):
            assert np.all(b == n * (k + rep) + n * (n - 1) / 2), (rep, k, b[:2])
        after = np.full(500, 1.0)
        Allreduce(work, MPI.IN_PLACE, after, straggler="arrival")   # the tables still agree
        assert np.all(after == n)
    work.Free()


def test_persistent_requests_as_mpi4pys(comm):
    """bool() True until Free; Startall over ours and mpi4py's, in any order; restarts."""
    n, rank = comm.Get_size(), comm.Get_rank()
    for rep in range(REPEAT):
        ours_buf, theirs_buf = np.zeros(300), np.zeros(300)
        ours = Allreduce_init(comm, MPI.IN_PLACE, ours_buf)
        theirs = MPI.Intracomm.Allreduce_init(comm, MPI.IN_PLACE, theirs_buf) \
            if hasattr(MPI.Comm, "Allreduce_init") and MPI.Get_version() >= (4, 0) else None
        assert ours and isinstance(ours, MPI.Prequest)
        for start in range(3):
            ours_buf[:] = rank + start
            mixed = [ours] if theirs is None else ([theirs, ours] if start % 2 else [ours, theirs])
            if theirs is not None:
                theirs_buf[:] = rank
            Prequest.Startall(mixed)
            MPI.Request.Waitall(mixed)
            assert ours, "a persistent request stays true between starts"
            assert np.all(ours_buf == n * start + n * (n - 1) / 2)
            if theirs is not None:
                assert np.all(theirs_buf == n * (n - 1) / 2)
        ours.Free()
        assert not ours
        if theirs is not None:
            theirs.Free()


@pytest.mark.parametrize("kind", ["nonblocking", "persistent"])
def test_a_derived_datatype_freed_while_pending(comm, kind):
    """MPI lets the caller free a datatype once the call returns: the operation keeps its
    own duplicate of it."""
    n, rank = comm.Get_size(), comm.Get_rank()
    add = MPI.Op.Create(_add_doubles, commute=True)     # MPICH has no SUM of derived types
    for rep in range(REPEAT):
        pair = MPI.DOUBLE.Create_contiguous(2).Commit()
        send, recv = np.full(64, float(rank + rep)), np.zeros(64)
        if kind == "nonblocking":
            request = Iallreduce(comm, [send, 32, pair], [recv, 32, pair], add)
            pair.Free()
            request.Wait()
        else:
            request = Allreduce_init(comm, [send, 32, pair], [recv, 32, pair], add)
            pair.Free()
            for _ in range(2):
                request.Start()
                request.Wait()
            request.Free()
        assert np.all(recv == n * rep + n * (n - 1) / 2), recv[:2]
    add.Free()


def _add_doubles(inbuf, inoutbuf, datatype):
    out = np.frombuffer(inoutbuf, dtype=np.float64)
    out += np.frombuffer(inbuf, dtype=np.float64)


def test_a_late_nonblocking_call_after_configure_keeps_the_lanes_in_step(comm):
    """configure() on every rank between calls while a late rank's operations are still
    queued: later operations still pair up (lanes and tickets are counted at the call)."""
    n, rank = comm.Get_size(), comm.Get_rank()
    work = comm.Dup()
    for rep in range(REPEAT):
        if rank == n - 1:
            time.sleep(0.005)
        first = np.full(200, float(rank))
        a = Iallreduce(work, MPI.IN_PLACE, first, algorithm="native")
        configure()
        second = np.full(200, float(rank + 1))
        b = Iallreduce(work, MPI.IN_PLACE, second, straggler="arrival")
        MPI.Request.Waitall([b, a])
        assert np.all(first == n * (n - 1) / 2) and np.all(second == n + n * (n - 1) / 2)
    work.Free()
