"""The progress engine: one thread per process that advances every nonblocking operation.

An operation is a generator of steps (core/steps.py): the call's path after bind,
the same one a blocking call drives in its own thread.  The thread polls the step
each operation waits on, plan machines and waits alike, in compiled code without the
GIL (run/_interpreter.pyx ``serve``); it takes the GIL only to resume an
operation whose step is over, which runs the operation's Python until its next step.
So phase 1 and the plan progress while the caller's Python computes.

Operations of one lane (core/sequences.py ``Lane``) run one at a time, in call order; the
lanes of a communicator, and different communicators, run at once.  The thread starts
with the first operation and sleeps (blocked, no CPU) while there is none.
"""
from __future__ import annotations

import threading
from collections import deque

from ..core import config as _config
from ..core.steps import Wait

from . import _interpreter

QUEUED, RUNNING, DONE = "queued", "running", "done"


class Operation:
    """A generator of steps and what became of it; ``done(op)`` is told when it ends
    (``error`` holds what it raised, ``result`` what it returned)."""

    def __init__(self, steps, lane, done, what="", settings=None):
        self.steps, self.lane, self._done, self.what = steps, lane, done, what
        self.settings = settings     # the settings at the call: its Python runs under them
        self.state, self.step, self.error, self.result = QUEUED, None, None, None
        self.engine = None
        self.resumes = 0         # times the thread took the GIL to run it to its next step

    def advance(self, value=None, error=None):
        """Run the operation's Python until its next step (False: it has ended)."""
        self.resumes += 1
        before = _config.pin(self.settings)
        try:
            step = self.steps.throw(error) if error is not None else self.steps.send(value)
        except StopIteration as stop:
            return self._end(DONE, None, stop.value)
        except BaseException as exc:      # handed to Wait / Test on this rank
            return self._end(DONE, exc, None)
        finally:
            _config.pin(before)
        self.step = _interpreter.Waiting(step.requests, step.until, step.need, step.probe) \
            if isinstance(step, Wait) else step
        return True

    def describe(self):
        owner = getattr(self.lane, "owner", None)
        where = f"lane {getattr(self.lane, 'index', '?')}" + (f" of communicator key {owner.key}" if owner else "")
        return f"{self.what or 'an operation'} ({where})"

    def outcome(self):
        """(value, error) of the step just over."""
        if isinstance(self.step, _interpreter.Waiting):
            return self.step.result(), None
        try:
            return self.step.result(), None
        except BaseException as exc:
            return None, exc

    def _end(self, state, error, result):
        self.state, self.error, self.result, self.step = state, error, result, None
        self.engine.ended(self)
        self._done(self)
        return False


class Engine:
    """The process's progress thread and the lanes' queues."""

    def __init__(self):
        self._cond = threading.Condition()
        self._queues = {}        # lane -> deque of its operations, the running one first
        self._new = []           # operations whose turn in their lane has come
        self._active = []        # operations the thread polls
        self._thread = None
        self._closing = False
        #: A test hook: ``delay(point, op)`` is called on the progress thread before it
        #: runs an operation's Python (``point``: "start" or "resume"); a fuzzer sleeps
        #: in it to force interleavings (tests/test_fuzz.py).  None in production.
        self.delay = None

    def submit(self, op):
        """Queue ``op`` behind the operations of its lane."""
        self.check_open()
        op.engine = self
        with self._cond:
            queue = self._queues.setdefault(op.lane, deque())
            queue.append(op)
            if len(queue) == 1:
                self._start(op)
            if self._thread is None:
                self._thread = threading.Thread(target=_interpreter.serve, args=(self,),
                                                daemon=True, name="stragglar_mpi progress")
                self._thread.start()

    def check_open(self):
        """Raise at the call if the process's exit has closed the engine (an atexit
        handler registered before ``import stragglar_mpi`` runs after the library's)."""
        if self._closing:
            raise RuntimeError(
                "stragglar_mpi: a nonblocking call after the library's exit steps ran (an "
                "atexit handler registered before `import stragglar_mpi` runs after them): "
                "nothing would progress it; call it before exit, or call the blocking Allreduce")

    def close(self, bound=None):
        """No more operations: the thread ends once those queued have ended.  ``bound``
        (seconds; None: none): past it, the operations still pending, one line each
        (False); True once the thread has ended."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        _interpreter.wake()
        if self._thread is None:
            return True
        self._thread.join(bound)
        return not self._thread.is_alive()

    def pending(self):
        """What each operation not yet ended waits for, one line each."""
        with self._cond:
            ops = [op for queue in self._queues.values() for op in queue]
        return [f"{op.describe()}: {op.state}, waiting on {type(op.step).__name__ if op.step else 'its turn'}"
                for op in ops]

    # --- on the thread ------------------------------------------------------------------

    def runnable(self):
        """The operations to poll (each has a step), or None to stop; blocks while none."""
        with self._cond:
            while not (self._new or self._active or self._closing):
                self._cond.wait()
            if not (self._new or self._active or any(self._queues.values())):
                return None
            starting, self._new = self._new, []
        for op in starting:
            if self.delay is not None:
                self.delay("start", op)
            if op.advance():
                self._active.append(op)
        return list(self._active)

    def resume(self, done):
        """Advance each operation whose step is over to its next step."""
        for op in done:
            value, error = op.outcome()
            if self.delay is not None:
                self.delay("resume", op)
            if not op.advance(value, error):
                self._active.remove(op)

    def _start(self, op):
        op.state = RUNNING
        self._new.append(op)
        self._cond.notify()
        _interpreter.wake()

    def ended(self, op):
        """``op`` has ended: the next of its lane starts (called by the operation)."""
        with self._cond:
            queue = self._queues[op.lane]
            queue.popleft()
            if queue:
                self._start(queue[0])
            else:
                del self._queues[op.lane]


ENGINE = Engine()
