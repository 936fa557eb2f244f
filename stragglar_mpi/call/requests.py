"""Nonblocking and persistent StragglAR: ``Iallreduce`` and ``Allreduce_init``.

- **Lanes: a shadow and a progress thread each.** A communicator's nonblocking
  operations go to up to LANES lanes, the k-th Iallreduce to lane k mod LANES (a
  persistent request keeps the lane it got at init).  A lane, made at its first
  operation, is an ``Idup`` of the communicator (its *shadow*) and a thread that runs
  the lane's operations one at a time, in call order.  Every rank starts the same
  operations in the same order (MPI's rule for collectives), so every rank puts an
  operation in the same lane, and the threads of all ranks meet in it.  Operations in
  different lanes run at once: a bucket's phase 1 need not wait for the phase 2 of the
  bucket before it, which waits for the straggler.
- **The thread runs the blocking call** (``_allreduce.Allreduce`` on the shadow) on
  the operation's buffers: bind, roles, phase 1, the plan, the timeout, all as for a
  blocking call.  Its waits release the GIL (the compiled transport runs the whole
  plan without it; phase 1 and the arrival notices are waited with Testall and
  sched_yield), so the early ranks' ReduceScatter, and their wait for the straggler,
  go on while the caller computes.
- **Blocking calls need not queue behind it.** They run in the caller's thread on the
  communicator's own private duplicate; no message of theirs can match one of the
  shadow's, and each communicator's collectives stay in call order.
- **Requests are MPI generalized requests** (``MPI.Grequest.Start``) that the thread
  completes: mpi4py's ``Request.Waitall``/``Testall``/``Waitany`` over a mix of ours
  and mpi4py's requests work as they are.  Our ``Wait`` first waits on a
  ``threading.Event`` (blocked, no CPU), then completes the MPI request at once
  (MPICH's own wait on a generalized request polls).
"""
from __future__ import annotations

import os
import threading
from collections import Counter, deque

from mpi4py import MPI

from ..bind.args import check
from ..core import config as _config
from ..core import tags
from ..core.errors import Mismatch, StragglerTimeout
from ..core.exchange import absent, cancel as _keep_pending, wait as _wait_for
from ..core import lifetime
from ..core.lifetime import PROCESS
from ..core.state import mark_own
from ..memory import cuda as _cuda
from ..memory.device import is_device_call
from . import allreduce as _allreduce
from . import record as _record

try:
    from ._entry import adopt
except ImportError:    # a source checkout without the build: no persistent requests
    adopt = None

QUEUED, RUNNING, DONE, CANCELLED = "queued", "running", "done", "cancelled"


def Iallreduce(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Nonblocking ``Allreduce``: returns an ``MPI.Request`` (Wait, Test, Cancel, Free).

    The arguments mean what they mean for ``Allreduce``; the result is defined after
    Wait or Test.  Needs MPI_THREAD_MULTIPLE (mpi4py's default)."""
    if not _allreduce._supported(comm):
        return MPI.Comm.Iallreduce(comm, _in_place(sendbuf), recvbuf, op)
    device = _check(comm, sendbuf, recvbuf, op, straggler, algorithm)
    call = _Call(_lanes(comm).next(), (sendbuf, recvbuf, op, straggler, algorithm), device)
    return Request(call.start())


def Allreduce_init(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Persistent ``Allreduce``: returns an ``MPI.Prequest`` (Start, Startall, Wait, Test,
    Cancel, Free); arguments are checked once, here."""
    if not _allreduce._supported(comm):
        return MPI.Comm.Allreduce_init(comm, _in_place(sendbuf), recvbuf, op)
    if adopt is None:
        raise RuntimeError("stragglar_mpi: Allreduce_init needs the compiled extensions "
                           "(pip install . builds them)")
    device = _check(comm, sendbuf, recvbuf, op, straggler, algorithm)
    return Prequest(_lanes(comm).next(), (sendbuf, recvbuf, op, straggler, algorithm), device)


def stats(comm) -> dict:
    """Per-communicator counters, blocking and nonblocking calls together: ``calls``
    (algorithm -> count) and ``last`` (the call that ended last).  Local."""
    mine = _record.stats(comm)
    lanes = comm.Get_attr(_KEYVAL) if isinstance(comm, MPI.Comm) else None
    calls, last, end = Counter(mine["calls"]), mine["last"], _record.last_end(comm)
    sent = dict(mine.get("arrival_messages", {"total": 0, "last": 0}))
    joined = "arrival_messages" in mine
    for lane in lanes.lanes if lanes is not None else ():
        theirs = _record.stats(lane.shadow) if lane.joined else {"calls": {}, "last": {}}
        calls.update(theirs["calls"])
        if "arrival_messages" in theirs:        # each lane's shadow has its own arrival table
            joined = True
            sent["total"] += theirs["arrival_messages"]["total"]
        if theirs["last"] and lane.last_end > end:
            last, end = theirs["last"], lane.last_end
            sent["last"] = theirs["arrival_messages"]["last"]
    merged = {"calls": dict(calls), "last": last}
    if joined:
        merged["arrival_messages"] = sent       # total: all lanes; last: the call that ended last
    return merged


def _in_place(sendbuf):
    return MPI.IN_PLACE if sendbuf is None else sendbuf


def _check(comm, sendbuf, recvbuf, op, straggler, algorithm):
    """Bad arguments raise at the call, as the blocking call's do.  Under
    STRAGGLAR_VALIDATE (errors on every rank) and for device buffers the checks run
    with the operation, and their errors come from Wait and Test.  Returns the
    caller's CUDA device for device buffers (the thread then works on it), else None."""
    _require_threads()
    settings = _config.current()
    device = is_device_call(sendbuf, recvbuf)
    if not (settings.validate or device):
        check(comm, sendbuf, recvbuf, op, straggler, algorithm, settings)
    if device and not _cuda.simulated():
        return _cuda.numba_cuda().get_current_device().id
    return None


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
    """One operation: its arguments, the generalized request that stands for it, its fate."""

    def __init__(self, progress, args, device=None):
        self.progress, self.args, self.device = progress, args, device
        self.state, self.error, self.reported, self.quiet = QUEUED, None, False, False
        self.finished = threading.Event()
        self.grequest = None

    def start(self):
        self.grequest = MPI.Grequest.Start(self._query, self._free, self._cancel)
        self.progress.submit(self)
        return self

    def run(self):
        sendbuf, recvbuf, op, straggler, algorithm = self.args
        try:
            self.progress.owner.usable()
            self.progress.join()
            if self.device is not None:    # kernels and copies on the caller's GPU
                _cuda.numba_cuda().select_device(self.device)
            _allreduce.Allreduce(self.progress.shadow, sendbuf, recvbuf, op,
                                 straggler=straggler, algorithm=algorithm)
        except BaseException as exc:     # handed to Wait / Test on this rank
            self.error = exc
            if isinstance(exc, (StragglerTimeout, Mismatch)):   # messages were abandoned
                self.progress.owner.broken = self.progress.owner.broken or str(exc)
        self.finish(DONE)

    def finish(self, state):
        self.state = state
        self.grequest.Complete()         # before the event: Wait then frees it at once
        self.finished.set()

    def raise_error(self):
        """The operation's error, once (by Wait or Test, or by the next one after a Waitall)."""
        if self.error is not None and not self.reported:
            self.reported = True
            raise self.error

    # MPI's callbacks of the generalized request (mpi4py acquires the GIL for them)
    def _query(self, status):
        status.Set_source(MPI.ANY_SOURCE)
        status.Set_tag(MPI.ANY_TAG)
        status.Set_elements(MPI.BYTE, 0)
        status.Set_cancelled(self.state == CANCELLED)
        if self.error is not None and not self.quiet:
            raise self.error     # mpi4py prints it and its Waitall raises MPI.Exception

    def _free(self):
        pass

    def _cancel(self, completed):
        pass                             # Cancel is ours (below); MPI's reaches no operation


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
        if self and call is not None and not call.progress.cancel(call):
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
    """What ``Allreduce_init`` returns: an ``MPI.Prequest``; each Start queues one operation.
    ``Startall`` starts ours and mpi4py's; ``Free`` releases it (once it completes)."""

    def __new__(cls, progress, args, device=None):
        return super().__new__(cls)

    def __init__(self, progress, args, device=None):
        super().__init__()
        self._progress, self._args, self._device, self._call = progress, args, device, None

    def Start(self):
        if self._args is None:
            raise RuntimeError("stragglar_mpi: Start of a persistent request that was freed")
        if self:
            raise RuntimeError("stragglar_mpi: Start of a persistent request that is still "
                               "active (Wait for it first)")
        call = _Call(self._progress, self._args, self._device).start()
        adopt(self, call.grequest)
        self._call = call

    @classmethod
    def Startall(cls, requests):
        for request in requests:
            request.Start() if isinstance(request, Prequest) else MPI.Prequest.Start(request)

    def Free(self):
        if self._args is None:
            raise RuntimeError("stragglar_mpi: Free of a persistent request that was freed")
        self._args = None
        if self:                          # started and not completed by a Wait: MPI frees
            MPI.Request.Free(self)        # its generalized request once the thread completes it


#: Open MPI's MPI_Comm_idup posts the later steps of its context-id agreement as it
#: progresses, so they can meet a collective the caller started on the same communicator
#: after it (open-mpi/ompi#2025; seen here as MPI_ERR_TRUNCATE in a native Iallreduce and a
#: hang).  There a lane's first operation completes the Idup before it returns: it waits
#: until every rank has made that call.
_IDUP_INTERFERES = MPI.get_vendor()[0] == "Open MPI"


class _Progress:
    """A lane: a shadow of the communicator and the thread that runs the lane's operations."""

    def __init__(self, comm, owner):
        shadow, self._joining = MPI.Intracomm.Idup(comm)    # completed by the thread
        self.shadow, self._comm, self.owner = MPI.Intracomm(shadow), comm, owner
        self.joined, self.last_end = False, 0.0
        self._cond = threading.Condition()
        self._queue = deque()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name="stragglar_mpi progress")
        self._thread.start()
        PROCESS.register("lanes", self)
        if _IDUP_INTERFERES:
            self.join()      # before the caller can start another collective on ``comm``


    def submit(self, call):
        with self._cond:
            self._queue.append(call)
            self._cond.notify()

    def cancel(self, call):
        """False when ``call`` is running; a queued one is cancelled and completed."""
        with self._cond:
            if call.state != QUEUED:
                return call.state != RUNNING
            self._queue.remove(call)
            call.state = CANCELLED
        call.finish(CANCELLED)
        return True

    def close(self):
        """No more operations: the thread runs those queued, frees the shadow and ends."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _serve(self):
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    break
                call = self._queue.popleft()
                call.state = RUNNING
            call.run()
            self.last_end = MPI.Wtime()
        if self.joined and not MPI.Is_finalized():
            self.shadow.Free()

    def join(self):
        """Complete the shadow's Idup (the first operation), under STRAGGLAR_TIMEOUT."""
        if self.joined:
            return
        timeout = _config.current().timeout
        deadline = MPI.Wtime() + timeout if timeout else 0.0
        # first call only, on the caller's communicator
        missing = absent(self._comm, deadline, tags.lane_setup()) if deadline else []
        if missing or not _wait_for([self._joining], deadline):
            _keep_pending([], self.shadow, self._joining)    # MPI may complete the Idup later
            who = (f"rank(s) {', '.join(map(str, missing))} did not arrive" if missing else
                   "every rank arrived, so the others may have given up waiting for this one")
            raise StragglerTimeout(
                f"stragglar_mpi: Iallreduce timed out after {timeout:g} s in the setup of its "
                f"duplicate (the first nonblocking call on this communicator): {who}. This "
                "communicator's nonblocking calls are now unusable; abort the job (comm.Abort()).",
                missing=missing, phase="the setup of the nonblocking calls' duplicate")
        self._comm = None
        self.joined = True
        self.shadow.Set_name(f"{self.shadow.Get_name()} (stragglar_mpi nonblocking)")
        mark_own(self.shadow)        # its operations run on it: no second duplicate


#: Lanes per communicator: operations that may run at once (each lane costs a duplicate,
#: its setup at the lane's first operation, a thread and the library's scratch memory).
LANES = 4


class _Lanes:
    """A communicator's lanes, made one by one as the operations reach them."""

    def __init__(self, comm):
        self.comm, self.lanes, self.started, self.broken = comm, [], 0, None

    def next(self):
        """The lane of the next operation (the same on every rank: the same count).  After
        a timeout no lane is made (its Idup would wait): the operation fails in lane 0."""
        k = self.started % LANES
        self.started += 1
        if k == len(self.lanes) and not (self.broken and self.lanes):
            self.lanes.append(_Progress(self.comm, self))
        return self.lanes[min(k, len(self.lanes) - 1)]

    def usable(self):
        """Raise, as the blocking call does, once an operation of these lanes timed out."""
        if self.broken:
            raise RuntimeError(f"stragglar_mpi: nonblocking calls on this communicator are "
                               f"unusable after: {self.broken}")

    def close(self):
        for lane in self.lanes:
            lane.close()
        self.comm = None


def _lanes(comm):
    lanes = comm.Get_attr(_KEYVAL)
    if lanes is None:
        lanes = _Lanes(comm)
        comm.Set_attr(_KEYVAL, lanes)
    return lanes


def _delete(comm, keyval, lanes):
    lanes.close()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete)


def _close_all():
    # At exit (core/lifetime.py): every thread runs what is queued and frees its shadow,
    # so nothing of ours runs inside MPI_Finalize.
    lanes = PROCESS.live("lanes")
    for progress in lanes:
        progress.close()
    for progress in lanes:
        progress._thread.join()


PROCESS.on_exit(lifetime.LANES, _close_all)
