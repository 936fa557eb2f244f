"""One decided call, run: the rank's program (phase 1 and its plan; run/programs.py) or
the native call, in the call's memory.  No branch per algorithm: every one with a
schedule is a program, run by the one compiled interpreter (a ``Machine`` per plan:
cython_src/run/_machine.pxi).

``execute`` is a generator (core/steps.py): it yields the plans' machines and the
native call's waits to whoever drives the call.  ``seq`` is the call's sequence
(core/sequences.py): its private duplicate, tags and host scratch."""
from __future__ import annotations

from mpi4py import MPI

from ..core.errors import Mismatch, Pending
from ..memory import device as _device
from ..memory.host import HOST
from ..schedule.algorithms import CHUNKED, NATIVE
from . import staged as _staged
from ._interpreter import machine
from .native import native
from .programs import program

MEMORY = {"host": HOST, "device": _device.DEVICE}
#: bench/rounds.py's stamps: a factory (plan, datatype) -> the round hook of a plan that
#: has none (``begin(round)``, ``end(round)``).  None in a job.
ROUND_HOOK = None


def execute(comm, seq, name, straggler, args, deadline, turn):
    """Generator: phase 1 and the plan (or the native call) in the call's memory;
    returns (end of phase 1 or None, first receive or None).  ``turn``: when the call may
    issue a collective on the private duplicate (core/turns.py).  A message of the wrong
    size, or an MPI error, in a call that the other ranks had given up (they timed out
    waiting for this rank; the messages are what their abandoned call left) raises
    ``Abandoned``, which says so."""
    try:
        if name == NATIVE or args.route != "host":
            return (yield from _elsewhere(comm, seq, name, straggler, args, deadline, turn))
        if not turn.back:
            turn.release()                # no collective in what follows
        prog = program(seq, name, straggler, args)
        return (yield from run(seq, prog, args, deadline, MPI.buffer(seq.scratch(prog.scratch_bytes)).address))
    except (Mismatch, MPI.Exception):
        if deadline:
            seq.check_given_up(before=False)
        raise


def run(seq, prog, args, deadline, scratch, local=None, staging=None):
    """Generator: this rank's program (run/programs.py), its phase 1 first, with
    ``scratch`` (an address) and ``local`` (a memory backend's local operations; None:
    the interpreter's host loops); ``staging`` (run/staged.py): told the plan, and when
    each of its rounds starts and ends, where the program says its chunks.

    Both phases run on the private duplicate, phase 1's rounds first: a rank's messages
    of one phase are all posted before those of the next, and MPI keeps the messages
    of one sender, tag and communicator in order, so the two never cross."""
    comm, dt, op = seq.private, args.out.datatype, args.op
    bufs = (args.src.address, args.out.address, scratch)
    if staging is not None and prog.chunks is not None:
        staging.start(prog.plan, prog.chunks, early=prog.early)
    else:                                 # staged whole (copied in before, back after), or not staged
        staging = ROUND_HOOK and ROUND_HOOK(prog.plan, dt)
    if prog.first is not None:
        step = machine(prog.first, bufs, comm, dt, op, deadline, local,
                       ROUND_HOOK and ROUND_HOOK(prog.first, dt), seq.tag0)
        try:
            if step is not None:
                yield step
        except Pending as exc:
            exc.phase = prog.phase1 or exc.phase        # a timeout names the phase
            raise
    t_p1 = MPI.Wtime()
    step = machine(prog.plan, bufs, comm, dt, op, deadline, local, staging, seq.tag0)
    return t_p1, ((yield step) if step is not None else None)


def _elsewhere(comm, seq, name, straggler, args, deadline, turn):
    """Generator: the native call, or a plan in device memory or staged through host memory."""
    if args.route == "staged":
        with _staged.Staging(seq, args, whole=name not in CHUNKED) as staged:
            if name == NATIVE:
                yield from native(comm, seq, staged.args, HOST, deadline, turn)
                return None, None
            if not turn.back:
                turn.release()
            prog = program(seq, name, straggler, staged.args)
            scratch = MPI.buffer(seq.scratch(prog.scratch_bytes)).address
            return (yield from run(seq, prog, staged.args, deadline, scratch, None, staged))
    memory = MEMORY[args.route]
    if name == NATIVE:
        yield from native(comm, seq, args, memory, deadline, turn)
        return None, None
    if not turn.back:
        turn.release()
    prog = program(seq, name, straggler, args)
    with memory.lease(seq) as lease:
        scratch = memory.scratch(lease, prog.scratch_bytes)
        return (yield from run(seq, prog, args, deadline, scratch,
                               memory.local(args.out.datatype, args.op)))
