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
from .record import record
from .setup import state_of


def call(comm, sendbuf, recvbuf, op, straggler, algorithm):
    """A call that the entry has no binding for: bind, then ``steps``.  Returns its Args
    when a repeat may reuse them (the entry keeps them as a binding), else None."""
    settings, t_call, deadline = clock()
    try:
        if not handled(comm):
            MPI.Comm.Allreduce(comm, MPI.IN_PLACE if sendbuf is None else sendbuf, recvbuf, op)
            return None
        state, args = bind(comm, (sendbuf, recvbuf, op, straggler, algorithm), settings, deadline)
        drive(steps(comm, state, args, t_call, deadline, state.blocking))
    except (Pending, Mismatch) as exc:
        raise drive(failed(peek(comm), exc, settings.timeout)) from None
    return None if settings.validate else args


def repeat(comm, state, args, settings):
    """A repeat of a bound call whose decision is not a native call from C."""
    t_call = MPI.Wtime()
    deadline = t_call + settings.timeout if settings.timeout else 0.0
    try:
        drive(steps(comm, state, args, t_call, deadline, state.blocking))
    except (Pending, Mismatch) as exc:
        raise drive(failed(state, exc, settings.timeout)) from None


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


def steps(comm, seq, args, t_call, deadline, turn):
    """Generator: the call after bind, in the sequence ``seq``: decide, run, record; its
    value is the call's ``CallRecord``.  ``t_call``: when it was called, ``deadline``: an
    MPI_Wtime or 0.0; ``turn``: its place among the collectives on the private duplicate."""
    if seq.owner.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {seq.owner.broken}")
    try:
        name, straggler, tracked, timing, how = yield from decide(seq, args, deadline, t_call)
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
    return record(seq, comm, args, (name, straggler, how), (t_call, t_p1, first), sent, tracked)


def failed(seq, exc, timeout):
    """Generator: the error for a call that cannot complete; marks the communicator's
    state unusable."""
    state = seq.owner if seq is not None else None
    if state is not None and state.bindings is not None:
        state.bindings.clear()      # a broken state is never reached from the compiled entry
    if isinstance(exc, Mismatch):
        if state is not None:
            state.broken = str(exc)
        return exc
    return (yield from _timed_out(seq, exc, timeout))


def _timed_out(seq, pending, timeout):
    """Generator: the StragglerTimeout of a ``Pending`` on this rank."""
    phase = pending.phase or "phase 2 (the round schedule)"
    if pending.missing is not None or seq is None:
        missing = list(pending.missing or ())
    else:
        missing = yield from seq.absent_ranks_steps()
    if missing:
        who = f"rank(s) {', '.join(map(str, missing))} did not arrive"
    elif pending.peers:
        who = f"no message came from rank(s) {', '.join(map(str, pending.peers))}"
    else:
        who = "every rank arrived, so the others may have given up waiting for this one (see their errors)"
    message = (f"stragglar_mpi: Allreduce timed out after {timeout:g} s in {phase}: {who}. "
               "This communicator's library state is now unusable; abort the job (comm.Abort()).")
    if seq is not None:
        seq.broken = message
        PROCESS.keep(seq.scratch(0))
    return StragglerTimeout(message, missing=missing, phase=phase, peers=pending.peers)
