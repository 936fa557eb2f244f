"""The one way the library issues an MPI collective on a communicator's private duplicate.

The rule: every collective there (a native AllReduce, auto's agreement, the argument
check's exchange) is issued in call order across the communicator's blocking and
nonblocking calls, which every rank sees alike.  A nonblocking operation takes a
ticket at its call (core/turns.py ``Turns``) and may issue its one collective once
every earlier ticket is back; a blocking call, which comes after all of them, issues
its collectives once no earlier operation holds one.  The setup's collectives (the
``Idup``, the key, the topology) run before any call may start (``State.ready``).

``issue`` is the only place that calls a collective on the duplicate after the setup.
"""
from __future__ import annotations


def issue(turn, post, deadline=0.0):
    """Generator: ``post()`` (it issues one collective on the private duplicate and
    returns its request) in ``turn``'s place, waited for under ``deadline``; the request."""
    if turn.back and not turn.blocking:
        raise RuntimeError("stragglar_mpi (a bug): a nonblocking operation issues a second "
                           "collective after giving its turn back")
    yield from turn.wait(deadline)
    try:
        return post()
    finally:
        turn.release()
