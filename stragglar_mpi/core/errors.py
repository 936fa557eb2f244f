"""Errors raised on every waiting rank when a call cannot complete, and the wording of
a wrong name."""
from __future__ import annotations

import difflib


class StragglerTimeout(TimeoutError):
    """A rank did not arrive (or a message did not come) within STRAGGLAR_TIMEOUT seconds.

    ``missing``: ranks that had not entered the call (when known); ``phase``: what
    this rank was doing; ``peers``: ranks whose messages this rank was waiting for.
    After it, this communicator's library state is unusable: abort the job
    (``comm.Abort()``) or stop using the communicator.
    """

    def __init__(self, message, missing=(), phase=None, peers=()):
        super().__init__(message)
        self.missing = tuple(missing)
        self.phase = phase
        self.peers = tuple(peers)


class Abandoned(StragglerTimeout):
    """This rank came to a call that the other ranks had given up: they timed out waiting
    for it (their own ``StragglerTimeout`` names this rank).  ``gave_up``: the ranks that
    said so.  Nothing of the abandoned call is taken for this call's data; the
    communicator's library state is unusable, as after any timeout."""

    def __init__(self, message, gave_up=(), phase=None):
        super().__init__(message, missing=(), phase=phase, peers=gave_up)
        self.gave_up = tuple(gave_up)


def abandoned_message(gave_up, before):
    """What ``Abandoned`` says; ``before``: found before the call had run anything."""
    ranks = ", ".join(map(str, gave_up))
    done = ("it did nothing (the receive buffer is untouched)" if before else
            "its result is undefined")
    return (f"stragglar_mpi: this Allreduce came after rank(s) {ranks} had given up the call: "
            f"they timed out waiting for this rank (STRAGGLAR_TIMEOUT; see their StragglerTimeout), "
            f"so it cannot complete; {done}. This communicator's library state is now unusable; "
            "abort the job (comm.Abort()).")


class Pending(Exception):
    """Internal: a wait under the deadline gave up; ``peers`` had not answered.

    ``phase`` says what was waited for (None: phase 2); ``missing`` is set when
    the peers are known not to have entered the call (the setup's presence check);
    ``watch``: the call sent no arrival notices (a native call under a timeout), so the
    stall watchdogs name the missing ranks (call/watchdog.py).
    """

    def __init__(self, peers, phase=None, missing=None, watch=False):
        super().__init__(peers)
        self.peers = tuple(peers)
        self.phase = phase
        self.missing = None if missing is None else tuple(missing)
        self.watch = watch


class Mismatch(ValueError):
    """Arguments that differ across ranks, found while messages were in flight (a message
    of another size than the plan expects, another straggler value).  The library state
    of the communicator is then unusable (messages were abandoned)."""


def size_message(peer, rnd, want, got, datatype, ierr=None):
    """What a ``Mismatch`` of message sizes says; ``got`` -1: larger than expected
    (MPI's truncation error ``ierr``)."""
    unit = f"elements of {datatype.Get_name() or 'the datatype'}"
    what = (f"brought {got} {unit} where this rank's plan expects {want}" if got >= 0
            else f"was larger than the {want} {unit} this rank's plan expects")
    text = (f"stragglar_mpi: the message from rank {peer} in round {rnd} {what}: the ranks "
            "passed different counts or datatypes (STRAGGLAR_VALIDATE=1 names the ranks)")
    if ierr is not None:
        from mpi4py import MPI
        text += f" [MPI: {MPI.Exception(MPI.Exception(ierr).Get_error_class()).Get_error_string()}]"
    return text


def did_you_mean(given, choices) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to a wrong name, else ``""``."""
    close = difflib.get_close_matches(str(given).lower(), list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
