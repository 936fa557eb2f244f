"""The spine of a call: bind -> decide -> run -> record.

``Allreduce`` is the compiled entry (cython_src/call/_entry.pyx): it reads the buffer
specs and looks for an earlier call's binding in the communicator's state.  A native
binding is one ``MPI_Allreduce`` from C; any other binding comes here as ``repeat``; a
call it has no binding for comes here as ``call``.  From there, one path::

    call:   bind (checks; under STRAGGLAR_VALIDATE on every rank alike)  -> steps
    repeat: the binding's Args, bound to this call's memory by the entry -> steps
    steps:  decide (decide/roles.py) -> run (run/execute.py) -> record (call/record.py)

``steps`` is a generator (core/steps.py): a blocking call drives it in the caller's
thread; a nonblocking one hands it to the progress thread (call/requests.py).  ``seq``
is the sequence the call runs in (core/sequences.py): the communicator's state for
blocking calls, a lane for nonblocking ones; ``state`` is always the communicator's.
"""
from __future__ import annotations

import sys

from mpi4py import MPI

from ..bind.args import check
from ..bind.validate import same_everywhere
from ..core import config as _config
from ..core.errors import Mismatch, Pending, StragglerTimeout
from ..core.lifetime import PROCESS
from ..core.state import peek
from ..decide.roles import decide, settle
from ..decide.tuning import timed
from ..run._interpreter import drive
from ..run.execute import execute as run
from . import flight
from .record import decided, record
from .setup import state_of
from .watchdog import missing as watched_missing


def call(comm, sendbuf, recvbuf, op, straggler, algorithm, serial=-1):
    """A call that the entry has no binding for: bind, then ``steps``.  Returns its Args
    when a repeat may reuse them (the entry keeps them as a binding), else None.
    ``serial``: its flight record (call/flight.py), opened by the entry."""
    settings, t_call, deadline = clock()
    try:
        if not handled(comm):
            MPI.Comm.Allreduce(comm, MPI.IN_PLACE if sendbuf is None else sendbuf, recvbuf, op)
            return None
        state, args = bind(comm, (sendbuf, recvbuf, op, straggler, algorithm), settings, deadline)
        flight.bound(serial, state, args, comm.Get_rank())
        drive(steps(comm, state, args, t_call, deadline, state.blocking, serial))
    except (Pending, Mismatch) as exc:
        raise _failed(peek(comm), exc, settings.timeout, serial) from None
    except BaseException as exc:
        flight.failed(serial, exc)
        raise
    return None if settings.validate else args


def repeat(comm, state, args, settings, serial=-1):
    """A repeat of a bound call whose decision is not a native call from C."""
    t_call = MPI.Wtime()
    deadline = t_call + settings.timeout if settings.timeout else 0.0
    try:
        drive(steps(comm, state, args, t_call, deadline, state.blocking, serial))
    except (Pending, Mismatch) as exc:
        raise _failed(state, exc, settings.timeout, serial) from None
    except BaseException as exc:
        flight.failed(serial, exc)
        raise


def _failed(state, exc, timeout, serial):
    """The error of a blocking call that cannot complete, noted in its flight record (the
    error that finding it raised, such as ``Abandoned``, too)."""
    try:
        error = drive(failed(state, exc, timeout, serial))
    except BaseException as raised:
        flight.failed(serial, raised)
        raise
    flight.failed(serial, error, getattr(error, "peers", None), getattr(error, "phase", None))
    return error


def timed_out_natively(state, serial, timeout, kept):
    """The StragglerTimeout of a native call from C under STRAGGLAR_TIMEOUT (its
    MPI_Iallreduce on the caller's communicator did not complete): ``kept``, the call's
    request and buffers, stay for good, as MPI may still complete it into them."""
    PROCESS.keep(kept)
    error = drive(failed(state, Pending((), "the native AllReduce", watch=True), timeout, serial))
    flight.failed(serial, error, None, error.phase)
    return error


def handled(comm):
    """Intracommunicators only; an intercommunicator (or any other kind) runs natively."""
    return isinstance(comm, MPI.Intracomm) and not comm.Is_inter()


def clock():
    """(settings, the call's start, its deadline or 0.0): what a call means, fixed at the call."""
    t_call = MPI.Wtime()
    settings = _config.current()
    return settings, t_call, (t_call + settings.timeout if settings.timeout else 0.0)


def bind(comm, given, settings, deadline):
    """(state, Args): every argument checked (bind/args.py); under STRAGGLAR_VALIDATE the
    checks run on every rank and their results are compared (bind/validate.py)."""
    if not settings.validate:
        args = check(comm, *given, settings)      # a bad argument raises before any setup
        return state_of(comm, deadline), args
    state = state_of(comm, deadline)
    checked = lambda: check(comm, *given, settings)  # noqa: E731
    return state, drive(same_everywhere(state, checked, deadline, state.blocking))


def steps(comm, seq, args, t_call, deadline, turn, serial=-1):
    """Generator: the call after bind, in the sequence ``seq``: decide, run, record; its
    value is the call's ``CallRecord``.  ``t_call``: when it was called, ``deadline``: an
    MPI_Wtime or 0.0; ``turn``: its place among the collectives on the private duplicate;
    ``serial``: its flight record (call/flight.py)."""
    if seq.owner.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {seq.owner.broken}")
    try:
        name, straggler, tracked, timing, how = yield from decide(seq, args, deadline, t_call)
        decided(serial, name, straggler)
        t_p1, first = yield from run(comm, seq, name, straggler, args, deadline, turn)
    except (Pending, Mismatch):
        raise
    except BaseException as exc:
        seq.abandon(f"an error in a call: {exc!r}")
        raise
    finally:
        if not turn.back:       # a blocking call holds no ticket
            turn.release()
    sent = (yield from settle(seq, deadline)) if tracked else 0
    if timing:
        yield from timed(seq, t_call, deadline, turn)
    return record(seq, comm, args, (name, straggler, how), (t_call, t_p1, first), sent, tracked,
                  serial)


def failed(seq, exc, timeout, serial=-1):
    """Generator: the error for a call that cannot complete; marks the communicator's
    state unusable."""
    state = seq.owner if seq is not None else None
    if state is not None and state.bindings is not None:
        state.bindings.clear()      # a broken state is never reached from the compiled entry
    if isinstance(exc, Mismatch):
        if state is not None:
            state.broken = str(exc)
        return exc
    return (yield from _timed_out(seq, exc, timeout, serial))


def _timed_out(seq, pending, timeout, serial):
    """Generator: the StragglerTimeout of a ``Pending`` on this rank."""
    phase = pending.phase or "phase 2 (the round schedule)"
    if pending.missing is not None or seq is None:
        missing = list(pending.missing or ())
    elif pending.watch:
        missing = _asked(seq.owner, serial)
    else:
        missing = yield from seq.absent_ranks_steps()
    if missing:
        who = f"rank(s) {', '.join(map(str, missing))} did not arrive"
    elif pending.peers:
        who = f"no message came from rank(s) {', '.join(map(str, pending.peers))}"
    else:
        who = "every rank arrived, so the others may have given up waiting for this one (see their errors)"
    message = (f"stragglar_mpi: Allreduce timed out after {timeout:g} s in {phase}: {who}. "
               "This communicator's library state is now unusable; abort the job (comm.Abort()). "
               "A longer wait: STRAGGLAR_TIMEOUT (seconds; unset or 0: no limit).")
    if seq is not None:
        seq.broken = message
        PROCESS.keep(seq.scratch(0))
    if not _config.current().trace:
        _say_recent(message)
    return StragglerTimeout(message, missing=missing, phase=phase, peers=pending.peers)


def _asked(state, serial):
    """The ranks not in an untracked call (a native one under a timeout): the stall
    watchdogs' answer (call/watchdog.py), each rank's own view."""
    rec = flight.as_dict(flight.RING[serial % flight.CAPACITY]) if serial >= 0 else None
    verdict = watched_missing(state, rec["seq"]) if rec and rec["seq"] else None
    if verdict is None:
        return []
    gone, silent, _ = verdict
    return sorted(set(gone) | set(silent))


def _say_recent(message):
    """Without STRAGGLAR_TRACE a timeout shows this rank's last calls on stderr."""
    sys.stderr.write(f"{message}\nstragglar_mpi: rank {MPI.COMM_WORLD.Get_rank()}'s last calls "
                     f"(STRAGGLAR_TRACE=DIR writes them to a file):\n{flight.recent()}\n")
    sys.stderr.flush()
