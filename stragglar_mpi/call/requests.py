"""Nonblocking and persistent StragglAR: ``Iallreduce`` and ``Allreduce_init``.

- **One path.** An operation is the blocking call's path after bind (call/allreduce.py
  ``steps``: decide, phase 1, the plan, the record), a generator of steps that the
  process's progress thread drives (run/engine.py): it polls every operation's plan
  machine and waits in compiled code without the GIL, so phase 1 and the plan progress
  while the caller's Python runs.
- **Lanes, not communicators.** A communicator's nonblocking operations go to its
  lanes (core/state.py ``Lane``, up to ``LANES``): the k-th Iallreduce to lane
  1 + k mod LANES, a persistent request to the lane it got at init.  Every rank starts
  the same operations in the same order (MPI's rule for collectives), so every rank
  puts an operation in the same lane.  Operations of one lane run one at a time, in
  call order; operations of different lanes at once (a bucket's phase 1 need not wait
  for the phase 2 of the bucket before it, which waits for the straggler).  All of them
  and the blocking calls share the communicator's private duplicate: each lane has its
  own tags, arrival table and decisions; a native AllReduce is issued there in call
  order (core/state.py ``Turns``).
- **Requests are MPI generalized requests** (``MPI.Grequest.Start``) that the progress
  thread completes: mpi4py's ``Request.Waitall``/``Testall``/``Waitany`` over a mix of
  ours and mpi4py's requests work as they are.  Our ``Wait`` first waits on a
  ``threading.Event`` (blocked, no CPU), then completes the MPI request at once
  (MPICH's own wait on a generalized request polls).
"""
from __future__ import annotations

import os
import threading

from mpi4py import MPI

from ..bind.args import check
from ..bind.validate import same_everywhere
from ..core import config as _config
from ..core import lifetime
from ..core.errors import Mismatch, Pending
from ..core.lifetime import PROCESS
from ..core.state import Turn
from ..core.steps import pause
from ..memory import cuda as _cuda
from ..memory.device import is_device_call
from ..run.engine import CANCELLED, ENGINE, Operation
from . import allreduce as _allreduce
from . import record as _record

try:
    from ._entry import adopt
except ImportError:    # a source checkout without the build: no persistent requests
    adopt = None


def Iallreduce(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Nonblocking ``Allreduce``: returns an ``MPI.Request`` (Wait, Test, Cancel, Free).

    The arguments mean what they mean for ``Allreduce``; the result is defined after
    Wait or Test.  Needs MPI_THREAD_MULTIPLE (mpi4py's default)."""
    if not _allreduce._supported(comm):
        return MPI.Comm.Iallreduce(comm, _in_place(sendbuf), recvbuf, op)
    spec = _Spec(comm, (sendbuf, recvbuf, op, straggler, algorithm))
    return Request(spec.start(spec.state.next_lane()))


def Allreduce_init(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Persistent ``Allreduce``: returns an ``MPI.Prequest`` (Start, Startall, Wait, Test,
    Cancel, Free); arguments are checked once, here."""
    if not _allreduce._supported(comm):
        return MPI.Comm.Allreduce_init(comm, _in_place(sendbuf), recvbuf, op)
    if adopt is None:
        raise RuntimeError("stragglar_mpi: Allreduce_init needs the compiled extensions "
                           "(pip install . builds them)")
    spec = _Spec(comm, (sendbuf, recvbuf, op, straggler, algorithm))
    return Prequest(spec, spec.state.next_lane())


def stats(comm) -> dict:
    """Per-communicator counters, blocking and nonblocking calls together: ``calls``
    (algorithm -> count) and ``last`` (the call that ended last).  Local."""
    return _record.stats(comm)


def _in_place(sendbuf):
    return MPI.IN_PLACE if sendbuf is None else sendbuf


class _Spec:
    """What an Iallreduce or Allreduce_init was called with, checked, and the
    communicator's state (made by the first call, its setup finished by a thread)."""

    def __init__(self, comm, given):
        _require_threads()
        self.comm, self.given = comm, given
        self.settings = _config.current()
        sendbuf, recvbuf, op, straggler, algorithm = given
        device = is_device_call(sendbuf, recvbuf)
        # Bad arguments raise at the call, as the blocking call's do.  Under
        # STRAGGLAR_VALIDATE (errors on every rank) and for device buffers the checks run
        # with the operation, and their errors come from Wait and Test.
        self.args = None if (self.settings.validate or device) else \
            check(comm, sendbuf, recvbuf, op, straggler, algorithm, self.settings)
        self.device = None      # the caller's CUDA device: the thread works on it
        if device and not _cuda.simulated():
            self.device = _cuda.numba_cuda().get_current_device().id
        timeout = self.settings.timeout
        self.state = _allreduce.begin_state(comm, MPI.Wtime() + timeout if timeout else 0.0,
                                            blocking=_IDUP_INTERFERES)

    def start(self, lane):
        """A new operation of these arguments in ``lane``: its generalized request."""
        call = _Call(self, lane, Turn(self.state.turns, self.state.turns.take()))
        call.grequest = MPI.Grequest.Start(call.query, call.free, call.cancel_callback)
        ENGINE.submit(call.operation)
        return call

    def steps(self, lane, turn):
        """Generator: the operation, on the progress thread."""
        settings, t_call, deadline = _allreduce.clock()
        try:
            yield from _ready(self.state)
            if self.device is not None:    # kernels and copies on the caller's GPU
                _cuda.numba_cuda().select_device(self.device)
            args = self.args
            if args is None:
                checked = lambda: check(self.comm, *self.given, settings)  # noqa: E731
                args = (yield from same_everywhere(lane, checked, deadline, turn)) \
                    if settings.validate else checked()
            yield from _allreduce.steps(self.comm, lane, args, settings, t_call, deadline, turn)
        except (Pending, Mismatch) as exc:
            raise (yield from _allreduce.failed(lane, exc, settings.timeout)) from None
        finally:
            turn.release()


def _ready(state):
    """Generator: until the communicator's setup (a thread's, at the first call) is over."""
    while not state.ready.is_set():
        yield from pause(MPI.Wtime() + 1e-3)
    if state.setup_error is not None:
        raise state.setup_error


def _require_threads():
    level = MPI.Query_thread()
    if level != MPI.THREAD_MULTIPLE:
        names = {MPI.THREAD_SINGLE: "SINGLE", MPI.THREAD_FUNNELED: "FUNNELED",
                 MPI.THREAD_SERIALIZED: "SERIALIZED"}
        raise RuntimeError(
            "stragglar_mpi: Iallreduce and Allreduce_init need MPI_THREAD_MULTIPLE (their "
            f"operations progress on a thread of their own); MPI runs at MPI_THREAD_"
            f"{names.get(level, level)}. mpi4py asks for MULTIPLE unless mpi4py.rc.thread_level "
            "says otherwise; an MPI built without thread support cannot run them")


class _Call:
    """One operation: the generalized request that stands for it, and its fate."""

    def __init__(self, spec, lane, turn):
        self.turn = turn
        self.operation = Operation(spec.steps(lane, turn), lane, self._ended)
        self.error, self.reported, self.quiet, self.cancelled = None, False, False, False
        self.finished = threading.Event()
        self.grequest = None

    def _ended(self, operation):
        self.error = operation.error
        self.grequest.Complete()         # before the event: Wait then frees it at once
        self.finished.set()

    def cancel(self):
        """Cancel the operation if it has not started; False once it has."""
        if not ENGINE.cancel(self.operation):
            return False
        if not self.finished.is_set():
            self.cancelled = True
            self.turn.release()          # its collective's turn passes to the next
            self.grequest.Complete()
            self.finished.set()
        return True

    def raise_error(self):
        """The operation's error, once (by Wait or Test, or by the next one after a Waitall)."""
        if self.error is not None and not self.reported:
            self.reported = True
            raise self.error

    # MPI's callbacks of the generalized request (mpi4py acquires the GIL for them)
    def query(self, status):
        status.Set_source(MPI.ANY_SOURCE)
        status.Set_tag(MPI.ANY_TAG)
        status.Set_elements(MPI.BYTE, 0)
        status.Set_cancelled(self.cancelled)
        if self.error is not None and not self.quiet:
            raise self.error     # mpi4py prints it and its Waitall raises MPI.Exception

    def free(self):
        pass

    def cancel_callback(self, completed):
        pass                     # Cancel is ours (below); MPI's reaches no operation


class _Ops:
    """Wait, Test, Cancel of the call in ``self._call`` (None: nothing was started)."""

    def Wait(self, status=None):
        call = self._call
        if self and call is not None:
            call.finished.wait()         # blocked, GIL released: the progress thread runs
            call.quiet = True            # the error comes from here, not as an MPI error
            MPI.Request.Wait(self, status)
        if call is not None and call.finished.is_set():
            call.raise_error()
        return True

    def Test(self, status=None):
        call = self._call
        if self and call is not None and not call.finished.is_set():
            os.sched_yield()             # a Test loop gives the core to the progress thread
            return False
        return self.Wait(status)

    def Cancel(self):
        """A queued operation is cancelled (Wait then returns, ``Is_cancelled()`` is True);
        cancel it on every rank, as it is a collective.  A started one cannot be (MPI
        cannot cancel a started collective either): that raises, and it completes."""
        call = self._call
        if self and call is not None and not call.cancel():
            raise RuntimeError("stragglar_mpi: this Allreduce has started and cannot be cancelled "
                               "(MPI cannot cancel a started collective); Wait for it")


class Request(_Ops, MPI.Request):
    """What ``Iallreduce`` returns: an ``MPI.Request`` completed by the progress thread."""

    def __new__(cls, call):
        return super().__new__(cls, call.grequest)

    def __init__(self, call):
        super().__init__()
        self._call = call


class Prequest(_Ops, MPI.Prequest):
    """What ``Allreduce_init`` returns: an ``MPI.Prequest``; each Start queues one operation
    in the lane it got at init.  ``Startall`` starts ours and mpi4py's; ``Free`` releases
    it (once it completes)."""

    def __new__(cls, spec, lane):
        return super().__new__(cls)

    def __init__(self, spec, lane):
        super().__init__()
        self._spec, self._lane, self._call = spec, lane, None

    def Start(self):
        if self._spec is None:
            raise RuntimeError("stragglar_mpi: Start of a persistent request that was freed")
        if self:
            raise RuntimeError("stragglar_mpi: Start of a persistent request that is still "
                               "active (Wait for it first)")
        call = self._spec.start(self._lane)
        adopt(self, call.grequest)
        self._call = call

    @classmethod
    def Startall(cls, requests):
        for request in requests:
            request.Start() if isinstance(request, Prequest) else MPI.Prequest.Start(request)

    def Free(self):
        if self._spec is None:
            raise RuntimeError("stragglar_mpi: Free of a persistent request that was freed")
        self._spec = None
        if self:                          # started and not completed by a Wait: MPI frees
            MPI.Request.Free(self)        # its generalized request once the thread completes it


#: Open MPI's MPI_Comm_idup posts the later steps of its context-id agreement as it
#: progresses, so they can meet a collective the caller starts on the same communicator
#: after it (open-mpi/ompi#2025; seen here as MPI_ERR_TRUNCATE in a native Iallreduce and a
#: hang).  There the first nonblocking call on a communicator finishes its setup before
#: it returns: it waits until every rank has made that call.
_IDUP_INTERFERES = MPI.get_vendor()[0] == "Open MPI"


def _close():
    # At exit (core/lifetime.py): the progress thread runs what is queued, so nothing of
    # ours runs inside MPI_Finalize.
    ENGINE.close()


PROCESS.on_exit(lifetime.ENGINE, _close)
