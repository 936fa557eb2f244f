"""A communicator's setup: the collective part of its first call.

Every collective step here runs under the call's deadline (an MPI_Wtime, 0 = none):
the setup (first call) with a deadline first waits for a presence message from every
member (zero bytes, on the caller's communicator, ``tags.setup()``), which names the
ranks that did not come; then ``Idup`` waited with the deadline; once it completes
every member is in the setup, so the key broadcast and what the higher rooms make here
(``collective``: the arrival tables, the topology) follow at once.  A nonblocking
first call posts the presence messages and the ``Idup`` at the call (in call order),
and a thread of its own finishes the setup (``begin_setup``), except on the MPIs where
the call finishes it (``blocking``: call/requests.py ``_SETUP_AT_THE_CALL``).
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


class _Setup:
    """The setup of one new ``state`` on ``comm``: ``join`` posts what it needs every
    member for, in call order at the call; ``finish`` waits for them, then the key and
    ``collective(state)``, what the higher rooms keep in the state (the arrival tables,
    the topology: decide/roles.setup)."""

    def __init__(self, state, comm, deadline, collective):
        self.state, self.comm, self.deadline, self.collective = state, comm, deadline, collective
        self.joining = None       # (presence exchange, duplicate, Idup request), from join
        self.members = None       # (rank, size) in the caller's communicator, from join

    def run(self):
        self.join()
        self.finish()

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
        """Wait for every member (``join``), then the key and ``collective``."""
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
        if self.collective is not None and private.Get_size() > 1:
            self.collective(state)


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


def setup_state(comm, deadline=0.0, bindings=None, collective=None) -> State:
    """The state of ``comm``, set up collectively in its first call (under ``deadline``);
    ``bindings`` and ``collective`` are what the call room gives a new one (``_Setup``).

    A setup that fails leaves a state behind that says why (``broken``), so that a
    later call raises instead of starting a second, mismatched setup.  A state that a
    nonblocking call is still setting up (``begin_setup``) is waited for."""
    release_freed()             # communicators the user freed since (State.free)
    state = comm.Get_attr(KEYVAL)
    if state is None:
        state = State(bindings() if bindings else None)
        comm.Set_attr(KEYVAL, state)
        if _set_up(state, _Setup(state, comm, deadline, collective).run):
            raise state.setup_error
        return state
    if not state.ready.is_set() and not _wait_ready(state, deadline):
        raise Pending([], _SETUP + ": a nonblocking call's setup of it has not ended")
    if state.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {state.broken}")
    return state


def begin_setup(comm, deadline=0.0, bindings=None, collective=None, blocking=False) -> State:
    """The state of ``comm`` for a nonblocking call: an existing one, or a new one whose
    setup the call starts (presence messages and Idup posted now, in call order) and a
    thread of its own finishes; its ``ready`` is set when it is over.  ``blocking``:
    finish it here instead (an MPI whose Idup must complete before the next collective)."""
    release_freed()
    state = comm.Get_attr(KEYVAL)
    if state is not None:
        return state
    state = State(bindings() if bindings else None)
    comm.Set_attr(KEYVAL, state)
    setup = _Setup(state, comm, deadline, collective)
    if _set_up(state, setup.join, done=False):
        return state                 # the operation raises the error from Wait
    state.hold()                     # the setup's thread holds it too (a Free meanwhile waits)

    def rest():
        try:
            _set_up(state, setup.finish)
        finally:
            state.unhold()
    if blocking:
        rest()
    else:
        thread = threading.Thread(target=rest, daemon=True, name="stragglar_mpi setup")
        PROCESS.register("setup", thread)      # the exit waits for it (_join_setups)
        thread.start()
    return state


def _set_up(state, step, done=True):
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
