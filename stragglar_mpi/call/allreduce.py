"""``Allreduce``: one call, one path: bind -> decide -> run -> record.

- bind: the compiled entry (call/_entry.pyx) reads the buffer specs and, on a hit,
  reuses an earlier call's checks; a miss comes here (``_call``) and runs them
  (bind/args.py), on every rank alike under STRAGGLAR_VALIDATE (bind/validate.py);
- decide: algorithm and straggler, the same on every rank (decide/roles.py);
- run: phase 1 and the rank's plan in the call's memory (run/execute.py);
- record: counters and the last call (call/record.py), the straggler report's log.

The path after bind is one generator, ``steps``: a blocking call drives it in the
caller's thread (core/steps.py ``drive``); a nonblocking one hands it to the progress
thread (call/requests.py).  ``seq`` is the sequence the call runs in (core/sequences.py):
the communicator's state for blocking calls, a lane for nonblocking ones.
"""
from __future__ import annotations

from mpi4py import MPI

from ..bind.args import check
from ..bind.validate import same_everywhere
from ..core import config as _config
from ..core.errors import Mismatch, Pending, StragglerTimeout
from ..core.lifetime import PROCESS
from ..core.setup import begin_setup, setup_state
from ..core.state import KEYVAL, peek
from ..core.steps import drive
from ..core.turns import Turn
from ..decide import roles as _roles
from ..decide import tuning as _tuning
from ..decide.algorithm import for_layout
from ..memory.buffers import Message
from ..run import transport as _transport
from ..run.execute import execute
from ..schedule.algorithms import AUTO, NATIVE
from .record import CallRecord, record
from .report import log_of

from . import _entry


def Allreduce(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Drop-in for ``comm.Allreduce(sendbuf, recvbuf, op)``.

    ``straggler``: who plays the straggler: a rank; "arrival" (the last rank to
    call, found at run time; the default); or "predict" (the rank that came
    last most often in recent calls, found without waiting).
    ``algorithm``: "auto" (default: native for small buffers or no delay,
    StragglAR when the observed delay pays), "stragglar", "hierarchical" (StragglAR
    on two tiers, for communicators that span nodes), "hring" (the hierarchical ring:
    ReduceScatter inside each node, a ring per lane across nodes, AllGather inside;
    the flat ring on one node), "ring", "rhd", "direct" or "native"; the STRAGGLAR_ALGO environment variable overrides it.
    Non-commutative ops, pair types (MAXLOC/MINLOC), derived datatypes and a
    single rank always take the native path.
    With STRAGGLAR_TIMEOUT set, a call that waits longer raises
    ``StragglerTimeout`` on every waiting rank; with STRAGGLAR_VALIDATE=1 every
    rank checks that all ranks passed the same arguments.
    """
    _call(comm, sendbuf, recvbuf, op, straggler, algorithm)


def state_of(comm, deadline=0.0):
    """The communicator's state (core/state.py), set up collectively in its first call: a
    new one gets the compiled entry's bindings and what decide keeps there."""
    return setup_state(comm, deadline, _entry.Bindings, _roles.setup)


def begin_state(comm, deadline=0.0, blocking=False):
    """The state for a nonblocking call: ``state_of``, but a new one's setup is started
    at the call and finished on a thread (core/setup.py ``begin_setup``)."""
    return begin_setup(comm, deadline, _entry.Bindings, _roles.setup, blocking)


def _call(comm, sendbuf, recvbuf, op, straggler, algorithm):
    """A call checked in full (a miss of the compiled entry); returns its Args when a
    repeat of it may reuse them, else None."""
    settings, t_call, deadline = clock()
    try:
        if not _supported(comm):
            _plain(comm, sendbuf, recvbuf, op)
            return None
        checked = lambda: check(comm, sendbuf, recvbuf, op, straggler, algorithm, settings)  # noqa: E731
        if settings.validate:
            state = state_of(comm, deadline)
            args = drive(same_everywhere(state, checked, deadline, Turn(state.turns)))
        else:
            args = checked()
        state = state_of(comm, deadline)
        drive(steps(comm, state, args, settings, t_call, deadline, Turn(state.turns)))
    except (Pending, Mismatch) as exc:
        raise drive(failed(peek(comm), exc, settings.timeout)) from None
    return None if settings.validate else args


def _run_bound(comm, state, args):
    """A repeat whose decision is not a native call from C (the compiled entry bound it)."""
    settings, t_call, deadline = clock()
    try:
        drive(steps(comm, state, args, settings, t_call, deadline, Turn(state.turns)))
    except (Pending, Mismatch) as exc:
        raise drive(failed(state, exc, settings.timeout)) from None


def clock():
    """(settings, the call's start, its deadline or 0.0)."""
    t_call = MPI.Wtime()
    settings = _config.current()
    return settings, t_call, (t_call + settings.timeout if settings.timeout else 0.0)


def _supported(comm):
    """Intracommunicators only; an intercommunicator (or any other kind) runs natively."""
    return isinstance(comm, MPI.Intracomm) and not comm.Is_inter()


def _plain(comm, sendbuf, recvbuf, op):
    """mpi4py's own ``Allreduce`` on a communicator the library does not handle."""
    MPI.Comm.Allreduce(comm, MPI.IN_PLACE if sendbuf is None else sendbuf, recvbuf, op)


def steps(comm, seq, args, settings, t_call, deadline, turn):
    """Generator: the call after bind, in the sequence ``seq``: decide, run, record
    (its value: the call's ``CallRecord``).  ``turn``: its place among the collectives on the private duplicate."""
    if seq.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {seq.broken}")
    try:
        name, straggler, tracked = yield from _decide(seq, args, deadline)
        timed, how = _tuning.picked(seq)   # a run of auto's measurements (decide/tuning.py)
        transport = None if name == NATIVE else _transport.name(settings)
        t_p1, first = yield from execute(comm, seq, name, straggler, args, transport, deadline, turn)
    except (Pending, Mismatch):
        raise
    except BaseException as exc:
        seq.abandon(f"an error in a call: {exc!r}")
        if seq.owner.bindings is not None:
            seq.owner.bindings.clear()   # no later call is served from the compiled entry
        raise
    finally:
        turn.release()
    sent = (yield from _roles.settle(seq, deadline)) if tracked else 0   # the record: every rank's time
    if timed:
        yield from _tuning.timed(seq, t_call, deadline, turn)
    t_end = MPI.Wtime()
    how = (how or "model") if args.name == AUTO else None
    rec = CallRecord(name, straggler, args.policy, t_call, t_p1 or t_call, first, t_end,
                     transport, args.route, sent, how)
    record(seq.owner, rec)
    if tracked and seq is seq.owner:      # the straggler report keeps the blocking calls
        post = t_end - (first if first is not None else t_call)
        log_of(seq, args.n, comm.Get_name()).ran(seq.tracked_seq, name, straggler,
                                                 args.out.count * args.out.extent, post)
    return rec


def _decide(seq, args, deadline):
    """Generator: (algorithm, straggler, whether the call is tracked)."""
    name, straggler, before = args.name, None, seq.tracked_seq
    if name != NATIVE or deadline:
        name, straggler = yield from _roles.roles(seq, name, args.policy, args.out.count * args.out.extent,
                                                  args.n, tracked=bool(deadline), deadline=deadline)
    return for_layout(name, seq.topology, straggler), straggler, seq.tracked_seq != before


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


# The package's one registration point (docs/ARCHITECTURE.md): the compiled entry is handed
# the Python pieces it falls back to (the state's key, the call, the bound run, Message),
# config tells it when settings change, and it becomes ``Allreduce``.  Nothing else in the
# package rebinds another module's attributes at import.
_entry.init(KEYVAL, _call, _run_bound, Message)
_config.on_configure(_entry.set_epoch)
_entry.Allreduce.__doc__ = Allreduce.__doc__
Allreduce = _entry.Allreduce  # noqa: F811
