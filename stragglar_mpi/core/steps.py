"""What an operation waits on, and the driver that runs one to its end in this thread.

A call's path is a generator: where it would wait, it yields a *step* and its driver
sends back the outcome.  A blocking call drives its own in the caller's thread
(``drive``); a nonblocking one is driven by the progress thread (run/engine.py),
which polls the steps of every operation in flight without the GIL.  Two kinds:

- ``Wait``: requests to complete (all, or any one), a message to arrive (``probe``:
  from any rank, with a tag, on a communicator: no receive from any rank stays posted,
  which MPICH's shared-memory-plus-network matching does not always match) or a time
  to pass; it completes nothing: the code that waited then completes them (``Test``,
  ``Wait``, ``Mrecv``), so the driver never touches an mpi4py request behind its back;
- a plan machine (run/transport.py, run/_interpreter.pyx): a rank's plan.

Every step has ``run()``: wait for it here, test and yield; the outcome.
"""
from __future__ import annotations

import os

from mpi4py import MPI


class Wait:
    """Until ``requests`` complete (all of them, or ``any`` one), a message can be probed
    (``probe``: (communicator, tag), from any rank) or MPI_Wtime passes ``until`` (0:
    never); the outcome is True, or False when the time ran out first."""
    __slots__ = ("requests", "until", "any", "probe")

    def __init__(self, requests=(), until=0.0, any=False, probe=None):
        self.requests, self.until, self.any, self.probe = list(requests), until, any, probe

    def run(self):
        need = 1 if self.any and self.requests else len(self.requests)
        while True:
            if self.probe is not None and self.probe[0].Iprobe(MPI.ANY_SOURCE, self.probe[1]):
                return True
            if need and sum(map(_complete, self.requests)) >= need:
                return True
            if self.until and MPI.Wtime() > self.until:
                return False
            if not (need or self.until or self.probe):
                return True
            os.sched_yield()


def _complete(request):
    """Whether ``request`` has completed (an error completes it too: whoever completes
    it then sees the error)."""
    try:
        return request.Get_status()
    except MPI.Exception:
        return True


def drive(gen):
    """Run the generator ``gen`` to its end in this thread, each step it yields waited
    here; returns what it returns, raises what it raises."""
    value, error = None, None
    while True:
        try:
            step = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            value = step.run()
        except BaseException as exc:
            error = exc


def complete(requests, until=0.0, statuses=None):
    """Generator: True once ``requests`` have completed (completed here, with
    ``statuses``), False if ``until`` passed first."""
    if not (yield Wait(requests, until)):
        return False
    MPI.Request.Waitall(requests, statuses)
    return True


def pause(until):
    """Generator: wait until MPI_Wtime passes ``until`` (a poll of something that no
    request stands for)."""
    yield Wait((), until)


def immediately(value=None):
    """Generator that waits for nothing: ``value`` (where a path sometimes waits)."""
    return value
    yield  # pragma: no cover  (makes this a generator)
