"""One decided call, run: phase 1 and the rank's plan (or the native call) in its memory.

``execute`` is a generator (core/steps.py): it yields the plans' machines and the
native call's wait to whoever drives the call.  ``seq`` is the call's sequence
(core/state.py): its private duplicate, tags and scratch."""
from __future__ import annotations

from mpi4py import MPI

from ..memory import device as _device
from ..memory.host import HOST
from ..core.errors import Mismatch, Pending
from ..schedule import PHASE1
from ..schedule.algorithms import CHUNKED, HIERARCHICAL, HRING, NATIVE
from . import hierarchical as _hierarchical
from . import staged as _staged
from . import transport as _transport
from .native import native
from .phases import exactly_commutative, plan_of

MEMORY = {"host": HOST, "device": _device.DEVICE}


def execute(comm, seq, name, straggler, args, transport, deadline, turn, staging=None):
    """Generator: phase 1 and the plan (or the native call) in the call's memory;
    returns (end of phase 1 or None, first receive or None).  Staged, they run in host
    memory.  ``turn``: when the call may issue a collective on the private duplicate
    (core/state.py ``Turns``).  A message of the wrong size, or an MPI error, in a call
    that the other ranks had given up (they timed out waiting for this rank; the
    messages are what their abandoned call left) raises ``Abandoned``, which says so."""
    try:
        return (yield from _execute(comm, seq, name, straggler, args, transport, deadline, turn,
                                    staging))
    except (Mismatch, MPI.Exception):
        if deadline:
            seq.check_given_up(before=False)
        raise


def _execute(comm, seq, name, straggler, args, transport, deadline, turn, staging=None):
    if args.route == "staged":
        with _staged.Staging(seq, args, whole=name not in CHUNKED) as staged:
            return (yield from execute(comm, seq, name, straggler, staged.args, transport,
                                       deadline, turn, staged))
    if name == NATIVE:
        yield from native(comm, seq, args, MEMORY[args.route], deadline, turn)
        return None, None
    turn.release()                # no collective in what follows
    commutative = exactly_commutative(args.op, args.out.datatype)
    if name == HIERARCHICAL:
        return (yield from _hierarchical.run(seq, straggler, args, transport, deadline,
                                             MEMORY[args.route], commutative))
    if name == HRING:
        return (yield from _hierarchical.run_hring(seq, args, transport, deadline,
                                                   MEMORY[args.route], commutative))
    return (yield from run_schedule(seq, name, straggler, args, transport, deadline,
                                    MEMORY[args.route], staging))


def run_schedule(seq, name, straggler, args, transport, deadline, memory, staging=None):
    """Generator: phase 1 on the early ranks, then this rank's plan, in ``memory`` (a
    backend); ``staging`` (run/staged.py): told the plan, and when each of its rounds starts.

    Both phases run on the private duplicate, phase 1's rounds first: a rank's messages
    of one phase are all posted before those of the next, and MPI keeps the messages
    of one sender, tag and communicator in order, so the two never cross."""
    comm, out, src = seq.private, args.out, args.src
    dt = out.datatype
    rank = comm.Get_rank()
    chunks, first_plan, plan = plan_of(name, comm.Get_size(), straggler, rank, out.count, out.extent,
                                       args.in_place, exactly_commutative(args.op, dt), dt.handle)
    if staging is not None:
        staging.start(plan, chunks, early=PHASE1.get(name) is not None and rank != straggler)
    scratch_bytes = max(plan.scratch_bytes, first_plan.scratch_bytes if first_plan else 0)
    with memory.lease(seq) as lease:
        addresses = (src.address, out.address, memory.scratch(lease, scratch_bytes))
        local = memory.local(dt, args.op)
        if first_plan is not None:
            yield from phase1(first_plan, addresses, comm, args, transport, deadline, local,
                              PHASE1[name], seq.tag0)
        t_p1 = MPI.Wtime()
        first = yield from _transport.run(plan, addresses, comm, dt, args.op, transport, deadline,
                                          local, staging, seq.tag0)
    return t_p1, first


def phase1(plan, addresses, comm, args, transport, deadline, local, kind, tag0):
    """Generator: the early ranks' phase 1; a timeout names it."""
    try:
        yield from _transport.run(plan, addresses, comm, args.out.datatype, args.op, transport,
                                  deadline, local, None, tag0)
    except Pending as exc:
        exc.phase = f"phase 1 ({kind} among the early ranks)"
        raise
