"""A communicator's first call sets up its state, collectively, in this order: core's part
(the private duplicate and the key: core/setup.py ``Setup``), then decide's (the arrival
tables, the layout and its links: decide/roles.py ``setup``), then the call room's own:
the flight recorder's code for it (call/flight.py), and the stall watchdog's thread is
started (call/watchdog.py).

A blocking first call runs all of it at the call (``state_of``).  A nonblocking one
(``begin_state``) posts what every member must join at the call, in call order, and a
thread of its own finishes the rest; the operation waits for ``state.ready``.  A setup
that fails leaves a state that says why (``broken``), so that a later call raises
instead of starting a second, mismatched setup.
"""
from __future__ import annotations

from ..core.setup import attempt, existing, new_state, on_thread, ready
from ..decide.roles import setup as decide_setup
from . import flight
from .watchdog import WATCHDOG_THREAD


def state_of(comm, deadline=0.0):
    """The state of ``comm``, set up in its first call (under ``deadline``); one that a
    nonblocking call is still setting up is waited for."""
    state = existing(comm)
    if state is not None:
        return ready(state, deadline)
    state, setup = new_state(comm, deadline)
    name = comm.Get_name()
    if attempt(state, setup.join, done=False) or attempt(state, lambda: _finish(state, setup, name)):
        raise state.setup_error
    return state


def begin_state(comm, deadline=0.0, at_the_call=False):
    """The state of ``comm`` for a nonblocking call: an existing one, or a new one whose
    setup starts now and ends on a thread (``at_the_call``: here, on an MPI whose Idup
    must complete before the next collective: call/requests.py)."""
    state = existing(comm)
    if state is not None:
        return state
    state, setup = new_state(comm, deadline)
    if attempt(state, setup.join, done=False):
        return state                 # the operation raises the error from Wait
    state.hold()                     # the setup's thread holds it too (a Free meanwhile waits)
    name = comm.Get_name()

    def rest():
        try:
            attempt(state, lambda: _finish(state, setup, name))
        finally:
            state.unhold()
    if at_the_call:
        rest()
    else:
        on_thread(rest)
    return state


def _finish(state, setup, name):
    setup.finish()
    if state.private.Get_size() > 1:
        decide_setup(state)
    flight.attach(state, name)         # the flight recorder's code and counter for it
    WATCHDOG_THREAD.start()
