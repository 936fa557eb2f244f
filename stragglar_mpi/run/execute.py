"""One decided call, run: the rank's program (phase 1 and its plan; run/programs.py) or
the native call, in the call's memory.  No branch per algorithm: every one with a
schedule is a program.

``execute`` is a generator (core/steps.py): it yields the plans' machines and the
native call's wait to whoever drives the call.  ``seq`` is the call's sequence
(core/sequences.py): its private duplicate, tags and scratch."""
from __future__ import annotations

from mpi4py import MPI

from ..memory import device as _device
from ..memory.host import HOST
from ..core.errors import Mismatch, Pending
from ..schedule.algorithms import CHUNKED, NATIVE
from . import staged as _staged
from . import transport as _transport
from .native import native
from .programs import program

MEMORY = {"host": HOST, "device": _device.DEVICE}


def execute(comm, seq, name, straggler, args, deadline, turn, staging=None):
    """Generator: phase 1 and the plan (or the native call) in the call's memory;
    returns (end of phase 1 or None, first receive or None).  Staged, they run in host
    memory.  ``turn``: when the call may issue a collective on the private duplicate
    (core/turns.py ``Turns``).  A message of the wrong size, or an MPI error, in a call
    that the other ranks had given up (they timed out waiting for this rank; the
    messages are what their abandoned call left) raises ``Abandoned``, which says so."""
    try:
        return (yield from _execute(comm, seq, name, straggler, args, deadline, turn,
                                    staging))
    except (Mismatch, MPI.Exception):
        if deadline:
            seq.check_given_up(before=False)
        raise


def _execute(comm, seq, name, straggler, args, deadline, turn, staging=None):
    if args.route == "staged":
        with _staged.Staging(seq, args, whole=name not in CHUNKED) as staged:
            return (yield from execute(comm, seq, name, straggler, staged.args, deadline,
                                       turn, staged))
    if name == NATIVE:
        yield from native(comm, seq, args, MEMORY[args.route], deadline, turn)
        return None, None
    turn.release()                # no collective in what follows
    return (yield from run(seq, program(seq, name, straggler, args), args, deadline,
                           MEMORY[args.route], staging))


def run(seq, prog, args, deadline, memory, staging=None):
    """Generator: this rank's program (run/programs.py), its phase 1 first, in ``memory``
    (a backend); ``staging`` (run/staged.py): told the plan, and when each of its rounds
    starts and ends, where the program says its chunks.

    Both phases run on the private duplicate, phase 1's rounds first: a rank's messages
    of one phase are all posted before those of the next, and MPI keeps the messages
    of one sender, tag and communicator in order, so the two never cross."""
    comm, out, dt = seq.private, args.out, args.out.datatype
    if prog.chunks is None:
        staging = None            # staged whole: copied in before, back after
    if staging is not None:
        staging.start(prog.plan, prog.chunks, early=prog.early)
    with memory.lease(seq) as lease:
        addresses = (args.src.address, out.address, memory.scratch(lease, prog.scratch_bytes))
        local = memory.local(dt, args.op)
        if prog.first is not None:
            yield from _phase1(prog, addresses, comm, args, deadline, local, seq.tag0)
        t_p1 = MPI.Wtime()
        m = _transport.machine(prog.plan, addresses, comm, dt, args.op, deadline, local, staging,
                               seq.tag0)
        first = (yield m) if m is not None else None
    return t_p1, first


def _phase1(prog, addresses, comm, args, deadline, local, tag0):
    """Generator: the early ranks' phase 1; a timeout names it (where the program says how)."""
    m = _transport.machine(prog.first, addresses, comm, args.out.datatype, args.op, deadline, local,
                           None, tag0)
    try:
        if m is not None:
            yield m
    except Pending as exc:
        if prog.phase1 is not None:
            exc.phase = prog.phase1
        raise
