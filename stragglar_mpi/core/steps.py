"""The step protocol: what a call's path waits on, and who waits for it.

A call's path (after bind) is a generator.  Where it would wait, it yields a *step*
and its driver sends back the step's outcome, or throws in what the step raised; the
generator's return value is the path's result.  The whole library keeps to it:

- **A step** is one of two kinds, nothing else:
  ``Wait`` (below): requests to complete (all, or any one), a message to arrive
  (``probe``: from any rank, with a tag, on a communicator: no receive from any rank
  stays posted, which MPICH's shared-memory-plus-network matching does not always
  match) or a time to pass.  It completes nothing: the code that waited then completes
  them (``Test``, ``Wait``, ``Mrecv``), so no driver touches an mpi4py request behind
  its back.  Its outcome is True, or False when the time ran out first;
  a plan machine (cython_src/run/_machine.pxi ``Machine``): a rank's plan
  in progress.  Its outcome is the MPI_Wtime of its first receive (or None); it raises
  ``Pending``, ``Mismatch`` or the MPI error of a failed plan.
- **Who drives it**: a blocking call drives its own generator in the caller's thread
  (cython_src/run/_drive.pxi ``drive``); a nonblocking one is an operation of the
  progress thread (run/engine.py), which polls the steps of every operation in flight.
  Both poll a step in compiled code without the GIL (a ``Wait`` as the compiled
  ``Waiting``) and take the GIL only to resume the generator once the step is over.
  The same path runs either way.
- **Naming**: a function that is such a generator says so first in its docstring
  ("Generator: ...") and is called with ``yield from``; one that sometimes waits and
  sometimes not still is one.  ``steps`` (call/allreduce.py) is the whole path of a call.
"""
from __future__ import annotations

from mpi4py import MPI


class Wait:
    """Until ``requests`` complete (all of them, or ``need`` of them), a message can be
    probed (``probe``: (communicator, tag), from any rank) or MPI_Wtime passes ``until``
    (0: never); the outcome is True, or False when the time ran out first."""
    __slots__ = ("requests", "until", "need", "probe")

    def __init__(self, requests=(), until=0.0, need=None, probe=None):
        self.requests, self.until, self.need, self.probe = list(requests), until, need, probe


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
