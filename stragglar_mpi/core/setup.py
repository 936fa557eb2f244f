"""A communicator's setup: core's collective part of its first call.

Every collective step here runs under the call's deadline (an MPI_Wtime, 0 = none):
the setup (first call) with a deadline first waits for a presence message from every
member (zero bytes, on the caller's communicator, ``tags.setup()``), which names the
ranks that did not come; then ``Idup`` waited with the deadline; once it completes
every member is in the setup, so the key broadcast and what the higher rooms make
(the arrival tables, the layout) follow at once.  The call room runs the steps in
order (call/setup.py): a nonblocking first call posts the presence messages and the
``Idup`` at the call (``Setup.join``, in call order) and a thread of its own
(``on_thread``) finishes the setup, except on the MPIs where the call finishes it.
"""
from __future__ import annotations

import os
import threading
import time

from mpi4py import MPI

from . import tags
from .errors import Pending
from .exchange import Exchange, absent, cancel, wait
from .lifetime import PROCESS, SETUPS, bounded_exit
from .state import KEYVAL, State, release_freed

_SETUP = "the setup of this communicator (its first call)"


class Setup:
    """Core's part of the setup of a new ``state`` on ``comm``: ``join`` posts what it
    needs every member for, in call order at the call; ``finish`` waits for them, then
    the key.  What the higher rooms keep in the state (the arrival tables, the layout:
    decide/roles.py ``setup``) follows, called by the call room (call/setup.py)."""

    def __init__(self, state, comm, deadline):
        self.state, self.comm, self.deadline = state, comm, deadline
        self.joining = None       # (presence exchange, duplicate, Idup request), from join
        self.members = None       # (rank, size) in the caller's communicator, from join

    def join(self):
        """Post the presence messages (under a deadline) and the Idup."""
        comm, presence = self.comm, None
        # The caller's communicator may be freed while the setup's thread runs (its
        # handle then reads MPI_COMM_NULL): only what is posted here uses it.
        self.members = (comm.Get_rank(), comm.Get_size())
        if self.deadline and comm.Get_size() > 1:
            others = [r for r in range(comm.Get_size()) if r != comm.Get_rank()]
            presence = Exchange(comm, others, tags.setup(), [bytearray(0), MPI.BYTE],
                                [[bytearray(0), MPI.BYTE] for _ in others])
        private, request = MPI.Intracomm.Idup(comm)
        self.joining = (presence, private, request)

    def finish(self):
        """Wait for every member (``join``), then the key."""
        state, deadline = self.state, self.deadline
        private = _joined(self.members, deadline, *self.joining)
        state.set_private(private)
        self.joining = None
        if deadline and self.members[1] > 1:
            # A rank that comes after the others gave up completes their Idup (it was
            # posted with the presence messages): it must not block in what follows.
            missing = absent(private, deadline, tags.setup())
            if missing:
                raise Pending(missing, _SETUP + ": the other ranks may have given up "
                              "waiting for this rank")
        # Every member has joined the Idup: what follows cannot wait for long.  The same
        # key on every member: arrival tables are freed at exit in key order, so ranks
        # that share several communicators never wait on each other crosswise.
        state.key = private.bcast((MPI.Wtime(), os.getpid(), id(state)), root=0)


def _joined(members, deadline, presence, private, request):
    missing = presence.silent(deadline) if presence is not None else []
    if missing:
        presence.cancel()
        cancel([], private, request)   # MPI completes the Idup into them later: keep them
        raise Pending(missing, _SETUP, missing=missing)
    if not wait([request], deadline):
        cancel([], private, request)
        rank, size = members
        others = [r for r in range(size) if r != rank]
        raise Pending(others, _SETUP + ": the other ranks did not join its duplicate "
                      "(they may have given up waiting for this rank)")
    return MPI.Intracomm(private)


def existing(comm):
    """The state of ``comm``, or None before its first call (communicators the user freed
    since are released first: State.free)."""
    release_freed()
    return comm.Get_attr(KEYVAL)


def new_state(comm, deadline=0.0):
    """(a new State attached to ``comm``, its ``Setup``): the first call makes them."""
    state = State()
    comm.Set_attr(KEYVAL, state)
    return state, Setup(state, comm, deadline)


def ready(state, deadline=0.0) -> State:
    """``state`` once a setup that a nonblocking call runs on a thread is over; raises if
    it does not end by ``deadline`` or the state is unusable."""
    if not state.ready.is_set() and not _wait_ready(state, deadline):
        raise Pending([], _SETUP + ": a nonblocking call's setup of it has not ended")
    if state.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {state.broken}")
    return state


def on_thread(run):
    """Run ``run`` (the rest of a setup) on a thread of its own, which the exit waits for."""
    thread = threading.Thread(target=run, daemon=True, name="stragglar_mpi setup")
    PROCESS.register("setup", thread)      # the exit waits for it (_join_setups)
    thread.start()


def attempt(state, step, done=True):
    """Run a part of the setup; True if it failed (``state.setup_error`` says why, and
    the state is broken and ready).  ``done``: the last part (the state is then ready)."""
    try:
        step()
    except BaseException as exc:
        state.broken = state.broken or f"its setup failed ({type(exc).__name__}: {exc})"
        state.setup_error = exc
        state.ready.set()
        return True
    if done:
        state.ready.set()
    return False


def _wait_ready(state, deadline):
    while not state.ready.wait(0.001):
        if deadline and MPI.Wtime() > deadline:
            return False
    return True


def _join_setups(bound):
    # A setup thread still inside a blocking step (its communicator freed by the user, or
    # its operation done without it) would be inside MPI during MPI_Finalize: a crash in
    # UCX's progress.
    until = time.monotonic() + bound if bound else None
    for thread in PROCESS.live("setup"):
        thread.join(None if until is None else max(0.0, until - time.monotonic()))
    return not _stuck()


def _stuck():
    return [t for t in PROCESS.live("setup") if t.is_alive()]


PROCESS.on_exit(SETUPS, lambda: bounded_exit(_join_setups, lambda: (
    f"{len(_stuck())} communicator setup(s) still running",
    ": a rank that never made the communicator's first call?")))
