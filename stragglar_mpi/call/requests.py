"""Nonblocking and persistent StragglAR: ``Iallreduce`` and ``Allreduce_init``.

- **One path.** An operation is the blocking call's path after bind (call/allreduce.py
  ``steps``: decide, phase 1, the plan, the record), a generator of steps that the
  process's progress thread drives (run/engine.py): it polls every operation's plan
  machine and waits in compiled code without the GIL, so phase 1 and the plan progress
  while the caller's Python runs.
- **Lanes, not communicators.** A communicator's nonblocking operations go to its
  lanes (core/sequences.py ``Lane``, up to ``LANES``): the k-th Iallreduce to lane
  1 + k mod LANES, a persistent request to the lane it got at init.  Every rank starts
  the same operations in the same order (MPI's rule for collectives), so every rank
  puts an operation in the same lane.  Operations of one lane run one at a time, in
  call order; operations of different lanes at once (a bucket's phase 1 need not wait
  for the phase 2 of the bucket before it, which waits for the straggler).  All of them
  and the blocking calls share the communicator's private duplicate: each lane has its
  own tags, arrival table and decisions; a native AllReduce is issued there in call
  order (core/turns.py ``Turns``).
- **Requests are MPI generalized requests** (``MPI.Grequest.Start``) that the progress
  thread completes: mpi4py's ``Request.Waitall``/``Testall``/``Waitany`` over a mix of
  ours and mpi4py's requests work as they are.  Our ``Wait`` first waits on a
  ``threading.Event`` (blocked, no CPU), then completes the MPI request at once
  (MPICH's own wait on a generalized request polls).
"""
from __future__ import annotations

import os
import sys
import threading
import traceback
import weakref

from mpi4py import MPI

from ..bind.args import check
from ..bind.validate import same_everywhere
from ..core import config as _config
from ..core import lifetime
from ..core.errors import Mismatch, Pending
from ..core.lifetime import PROCESS
from ..core.turns import Turn
from ..core.steps import pause
from ..memory import cuda as _cuda
from ..memory.device import is_device_call
from ..run.engine import ENGINE, Operation
from . import allreduce as _allreduce
from . import flight
from . import record as _record
from .setup import begin_state

from ._entry import adopt


def Iallreduce(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Nonblocking ``Allreduce``: returns an ``MPI.Request`` (Wait, Test, Cancel, Free).

    The arguments mean what they mean for ``Allreduce``; the result is defined after
    Wait or Test.  Needs MPI_THREAD_MULTIPLE (mpi4py's default)."""
    if not _allreduce.handled(comm):
        return MPI.Comm.Iallreduce(comm, _in_place(sendbuf), recvbuf, op)
    spec = _Spec(comm, (sendbuf, recvbuf, op, straggler, algorithm))
    return Request(spec.start(spec.state.next_lane()))


def Allreduce_init(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Persistent ``Allreduce``: returns an ``MPI.Prequest`` (Start, Startall, Wait, Test,
    Cancel, Free); arguments are checked once, here."""
    if not _allreduce.handled(comm):
        return MPI.Comm.Allreduce_init(comm, _in_place(sendbuf), recvbuf, op)
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
        sendbuf, recvbuf, *rest = given
        self.types = []          # our duplicates of the caller's derived datatypes
        given = (self._own_types(sendbuf), self._own_types(recvbuf), *rest)
        if self.types:
            weakref.finalize(self, _free_types, self.types)
        self.comm, self.given, self.rank = comm, given, comm.Get_rank()
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
        self.state = begin_state(comm, MPI.Wtime() + timeout if timeout else 0.0,
                                 at_the_call=_SETUP_AT_THE_CALL)

    def _own_types(self, spec):
        """``spec`` with each derived datatype replaced by a duplicate of ours, freed with
        this object: the caller may free theirs once the call returns (MPI allows it)."""
        if not isinstance(spec, (list, tuple)):
            return spec
        out = list(spec)
        for i, item in enumerate(out):
            if isinstance(item, MPI.Datatype) and item != MPI.DATATYPE_NULL and not item.is_predefined:
                mine = next((d for h, d in self.types if h == item.handle), None)
                if mine is None:            # one duplicate a datatype: send and receive alike
                    mine = item.Dup()
                    self.types.append((item.handle, mine))
                out[i] = mine
        return type(spec)(out)

    def start(self, lane):
        """A new operation of these arguments in ``lane``: its generalized request.
        What it means (settings, deadline, tracking) is fixed here, at the call, on every
        rank alike; the progress thread only runs it."""
        ENGINE.check_open()
        when = _allreduce.clock()
        turn = Turn(self.state.turns, self.state.turns.take())
        self.state.hold()        # the state outlives a Free of the communicator until it ends
        try:
            serial = flight.open_call(when[1])
            flight.bound(serial, self.state, self.args, self.rank)
            call = _Call(self, lane, turn, when + (serial,))
            call.grequest = MPI.Grequest.Start(call.query, call.free, call.cancel_callback)
            ENGINE.submit(call.operation)
        except BaseException:
            turn.release()       # the ticket is given back: later operations are not held up
            self.state.unhold()
            raise
        return call

    def steps(self, lane, turn, when):
        """Generator: the operation, on the progress thread; ``when``: (settings, the
        call's time, its deadline, its flight record), taken at the call."""
        settings, t_call, deadline, serial = when
        try:
            yield from _ready(self.state)
            # The caller may Free its communicator once the call returns (MPI allows
            # it): from here on the operation uses the private duplicate (the same group).
            comm = self.state.private
            if self.device is not None:    # kernels and copies on the caller's GPU
                _cuda.numba_cuda().select_device(self.device)
            args = self.args
            if args is None:
                checked = lambda: check(comm, *self.given, settings)  # noqa: E731
                args = (yield from same_everywhere(lane, checked, deadline, turn)) \
                    if settings.validate else checked()
                flight.described(serial, args)
            return (yield from _allreduce.steps(comm, lane, args, t_call, deadline, turn, serial))
        except (Pending, Mismatch) as exc:
            error = yield from _failed(lane, exc, settings.timeout, serial)
            raise error from None
        except BaseException as exc:
            flight.failed(serial, exc)
            raise
        finally:
            turn.release()


def _failed(lane, exc, timeout, serial):
    """Generator: the operation's error (call/allreduce.failed), noted in its flight record."""
    try:
        error = yield from _allreduce.failed(lane, exc, timeout, serial)
    except BaseException as raised:
        flight.failed(serial, raised)
        raise
    flight.failed(serial, error, getattr(error, "peers", None), getattr(error, "phase", None))
    return error


def _free_types(types):
    if not MPI.Is_finalized():
        for _, datatype in types:
            datatype.Free()


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

    def __init__(self, spec, lane, turn, when):
        self.turn, self.state = turn, spec.state
        self.operation = Operation(spec.steps(lane, turn, when), lane, self._ended,
                                   f"a nonblocking Allreduce (ticket {turn.ticket})", when[0])
        self.error, self.reported, self.quiet = None, False, False
        self.record = None               # the call's CallRecord once it succeeded
        self.finished = threading.Event()
        self.grequest = None
        self._lock = threading.Lock()    # on_done against the end, nothing else
        self._callbacks = []

    def _ended(self, operation):
        self.error, self.record = operation.error, operation.result
        self.grequest.Complete()         # before the event: Wait then frees it at once
        with self._lock:
            self.finished.set()
            callbacks, self._callbacks = self._callbacks, []
        self.state.unhold()
        for fn in callbacks:             # the engine holds no lock here (Operation._end)
            self._run(fn)

    def on_done(self, fn):
        """``fn(error, record)`` once the operation has ended: on the progress thread, or
        here if it already has."""
        with self._lock:
            if not self.finished.is_set():
                self._callbacks.append(fn)
                return
        self._run(fn)

    def _run(self, fn):
        # A callback that raises must not end the progress thread; its error is shown
        # as threading shows an uncaught one.
        try:
            fn(self.error, self.record if self.error is None else None)
        except BaseException:
            sys.stderr.write(f"stragglar_mpi: an on_done callback raised:\n{traceback.format_exc()}")
            sys.stderr.flush()

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
        status.Set_cancelled(False)
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
        if _live(self) and call is not None:
            call.finished.wait()         # blocked, GIL released: the progress thread runs
            call.quiet = True            # the error comes from here, not as an MPI error
            MPI.Request.Wait(self, status)
        if call is not None and call.finished.is_set():
            call.raise_error()
        return True

    def Test(self, status=None):
        call = self._call
        if _live(self) and call is not None and not call.finished.is_set():
            os.sched_yield()             # a Test loop gives the core to the progress thread
            return False
        return self.Wait(status)

    def on_done(self, fn):
        """Call ``fn(error, record)`` once the operation has ended, with its result in the
        buffer: ``error`` is what Wait would raise (None: it succeeded), ``record`` the
        call's ``CallRecord`` (None after an error).  ``fn`` runs on the progress thread (or
        at once, in this thread, if the operation has already ended); it must be short and
        start no blocking call of the library.  The request still needs a Wait, a Test
        or a Free; a Free right after ``on_done`` is the usual way (the error then reaches
        only ``fn``)."""
        if self._call is None:
            raise RuntimeError("stragglar_mpi: on_done of a persistent request never started")
        self._call.on_done(fn)

    def Cancel(self):
        """Does nothing: the operation completes normally, and ``Is_cancelled()`` of its
        status is False.  MPI makes cancelling a started collective erroneous, and whether
        an operation has started differs from rank to rank; an outcome that depended on
        it could differ too (one rank's operation removed, another's running)."""


def _live(request):
    """Whether the MPI handle is a request (not MPI_REQUEST_NULL)."""
    return MPI.Request.__bool__(request)


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

    def __bool__(self):
        """True until Free, as mpi4py's persistent requests (active or not)."""
        return self._spec is not None

    def Start(self):
        if self._spec is None:
            raise RuntimeError("stragglar_mpi: Start of a persistent request that was freed")
        if _live(self):
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
        if _live(self):                   # started and not completed by a Wait: MPI frees
            MPI.Request.Free(self)        # its generalized request once the thread completes it


#: Where a first nonblocking call finishes its communicator's setup before it returns
#: (it waits until every rank has made that call, so first calls on new communicators
#: must come in the same order on every rank, as blocking ones must).  Open MPI: its
#: MPI_Comm_idup posts the later steps of its context-id agreement as it progresses, so
#: they can meet a collective the caller starts after it (open-mpi/ompi#2025; seen here as
#: MPI_ERR_TRUNCATE in a native Iallreduce, and a hang).  Intel MPI 2021: a setup thread
#: making communicators while the caller posted the next calls' Idups hung it for good
#: (new communicators in a row, mpi/test_legal_free.py at 4 ranks; docs/MPIS.md).
_SETUP_AT_THE_CALL = MPI.get_vendor()[0] in ("Open MPI", "Intel MPI")


def _pending():
    lines = "".join(f"\n  {line}" for line in ENGINE.pending())
    return ("nonblocking operations still pending",
            f":{lines}\nthey never completed (a rank that did not make the call?)")


# At exit (core/lifetime.py): the progress thread runs what is queued, so nothing of ours
# runs inside MPI_Finalize.
PROCESS.on_exit(lifetime.ENGINE, lambda: lifetime.bounded_exit(ENGINE.close, _pending))
