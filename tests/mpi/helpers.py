"""What the MPI test files share: agreement across ranks, the inputs' formulas and their
expected results, settings for a block, threads, the timing tests' figures, and a rank
made late, by its arrival stamps or for real."""
import os
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import configure
from stragglar_mpi.call.allreduce import state_of
from stragglar_mpi.run._interpreter import drive
from stragglar_mpi.decide import clock
from stragglar_mpi.decide.arrival import coordinator


# --- agreement: each helper is collective (every rank of ``comm`` calls it) -----------------
def assert_same_on_every_rank(comm, value, what="the value"):
    """Every rank of ``comm`` holds ``value`` (an array: bit for bit)."""
    mine = value.tobytes() if isinstance(value, np.ndarray) else value
    everyone = comm.allgather(mine)
    differ = [r for r, v in enumerate(everyone) if v != everyone[0]]
    shown = "" if isinstance(value, np.ndarray) else f": {everyone}"
    assert not differ, f"{what} differs from rank 0's on ranks {differ}{shown}"


def true_on_every_rank(comm, flag):
    """Whether ``flag`` holds on every rank of ``comm`` (each rank gets the same answer)."""
    return comm.allreduce(bool(flag), MPI.LAND)


# --- inputs from a formula of (rank, index), so the result is known at any size ----------
INTS = list("bBhHiIlLqQ")
FLOATS = list("efdg")
COMPLEX = list("FDG")
ARITH = [(c, op) for c in INTS + FLOATS for op in ("SUM", "PROD", "MAX", "MIN")] + \
        [(c, op) for c in COMPLEX for op in ("SUM", "PROD")]
BITS = [(c, op) for c in INTS for op in ("BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR")] + \
       [("?", op) for op in ("LAND", "LOR", "LXOR")]
CASES = ARITH + BITS        # (typecode, op name): every datatype with every op that applies


def contribution(rank, size, count, code, opname):
    i = np.arange(count)
    if opname == "PROD":            # exactly one rank contributes 2 at each index
        x = np.where((i + rank) % size == 0, 2, 1)
    elif opname in ("LAND", "LOR", "LXOR"):
        x = ((i * 7 + rank * 3) % 5 < 3).astype(int)
        if opname == "LAND":
            x = np.where(i % 3 == 0, 1, x)
    elif opname in ("BAND", "BOR", "BXOR"):
        x = (i * 5 + rank * 11) % 64
    else:
        x = (i * 3 + rank * 7) % 13 + (rank == size - 1)
    x = x.astype(np.dtype(code))
    if code in COMPLEX:
        x = x + 1j * x.real.astype(x.dtype)
    return x


_NP = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum,
       "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor,
       "LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor}


def expected(size, count, code, opname):
    """The reduction of every rank's ``contribution``."""
    acc = contribution(0, size, count, code, opname)
    for r in range(1, size):
        acc = _NP[opname](acc, contribution(r, size, count, code, opname))
    return acc.astype(np.dtype(code))


def mpi_maps(code):
    """Whether this MPI has a datatype for ``code`` (Open MPI 4.1 has none for float16)."""
    try:
        MPI.Datatype.fromcode(code)
    except (KeyError, ValueError):
        return False
    return True


# --- settings, sizes, threads -------------------------------------------------------------
@contextmanager
def env(**values):
    """Settings changed for a block: the environment, then ``configure()`` on every rank."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    configure()
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        configure()


def needs(n, comm):
    if comm.Get_size() < n:
        pytest.skip(f"needs {n} ranks")


#: The timing tests (marked ``timeouts``): STRAGGLAR_TIMEOUT, and how long the late rank
#: sleeps, far past it.
TIMEOUT, LATE = 1.0, 3.0


def timing_size(comm):
    """Marked ``timeouts``: tests/test_mpi.py runs these in their own launch (they abandon
    requests on purpose, as a job does before it aborts), at 4 ranks."""
    if comm.Get_size() != 4:
        pytest.skip("timing tests run at 4 ranks")


def in_threads(target, argsets):
    """``target(*args)`` for each of ``argsets``, each in its own thread, all joined."""
    threads = [threading.Thread(target=target, args=args) for args in argsets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# --- a late rank ----------------------------------------------------------------------------
# What is read from the arrival stamps (the records, "predict", "auto"'s history, the report,
# the coordinator of the next roles) follows ``late``, which moves a rank's stamps without
# anyone waiting.  Roles by arrival (straggler="arrival") name the rank whose notice has not
# come when the others are in: real timing, which ``last_to_arrive`` settles by waiting for
# an event, not a clock.  ``really_late`` sleeps: for what a real delay does to the messages.
@contextmanager
def late(comm, rank, seconds):
    """Inside the block, rank ``rank`` of ``comm`` arrives ``seconds`` late by its arrival
    stamps (the test hook of decide/clock.py); no message, nobody waits."""
    mine = comm.Get_rank() == rank
    if mine:
        clock.late_by = seconds
    try:
        yield
    finally:
        if mine:
            clock.late_by = None


@contextmanager
def last_to_arrive(comm, rank, seconds):
    """``late`` by ``seconds``, and rank ``rank`` enters the block only once the roles of
    its next call (a call that takes roles by arrival) are settled without it: the roles
    and the record name it, whatever the load; collective."""
    state_of(comm)                  # made on every rank at once, before anyone waits
    with late(comm, rank, seconds):
        if comm.Get_rank() == rank and comm.Get_size() > 1:
            arrive_after_everyone_else(comm)
        yield


def arrive_after_everyone_else(c):
    """Block until the next call's roles are settled without this rank: the coordinator
    has every other rank's notice (and has sent its answer, when it is another rank).
    ``c``'s state must exist (an earlier call, or ``state_of`` on every rank)."""
    arrivals = state_of(c).arrivals()
    lead = coordinator(drive(arrivals.record_before()), arrivals.n)
    while True:
        if lead == c.Get_rank():
            if len(arrivals.heard()) == arrivals.n - 1:
                return
        elif _decided(arrivals, lead):
            return
        time.sleep(0.0002)


def _decided(arrivals, lead):
    """Whether the roles of this rank's next call have come (it has not entered it)."""
    if arrivals.protocol == "notices":          # the coordinator's answer waits here
        return arrivals.comm.Iprobe(lead, arrivals.tags[1])
    arrivals._pump()                              # groups: every kind on one tag
    call = arrivals._calls.get(arrivals.seq)
    return call is not None and call.decision is not None


def really_late(comm, rank, seconds=0.02):
    """Rank ``rank`` of ``comm`` sleeps ``seconds``: the others' messages wait for it."""
    if comm.Get_rank() == rank:
        time.sleep(seconds)
