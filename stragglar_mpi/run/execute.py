"""One decided call, run: phase 1 and the rank's plan (or the native call) in its memory."""
from __future__ import annotations

from mpi4py import MPI

from ..memory import device as _device
from ..memory.host import HOST
from ..core.errors import Pending
from ..schedule import PHASE1
from ..schedule.algorithms import CHUNKED
from . import hierarchical as _hierarchical
from . import staged as _staged
from . import transport as _transport
from .native import native
from .phases import exactly_commutative, plan_of, wait_all

MEMORY = {"host": HOST, "device": _device.DEVICE}


def execute(comm, state, name, straggler, args, transport, deadline, staging=None):
    """Phase 1 and the plan (or the native call) in the call's memory; returns (end of
    phase 1 or None, first receive or None).  Staged, they run in host memory."""
    if args.route == "staged":
        with _staged.Staging(state, args, whole=name not in CHUNKED) as staged:
            return execute(comm, state, name, straggler, staged.args, transport, deadline, staged)
    if name == "native":
        native(comm, state, args, MEMORY[args.route], deadline)
        return None, None
    if name == "hierarchical":
        commutative = exactly_commutative(args.op, args.out.datatype)
        return _hierarchical.run(state, straggler, args, transport, deadline, wait_all, commutative)
    if name == "hring":
        commutative = exactly_commutative(args.op, args.out.datatype)
        return _hierarchical.run_hring(state, args, transport, deadline, MEMORY[args.route], commutative)
    return run_schedule(state, name, straggler, args, transport, deadline, MEMORY[args.route], staging)


def run_schedule(state, name, straggler, args, transport, deadline, memory, staging=None):
    """Phase 1 on the early ranks, then this rank's plan, in ``memory`` (a backend);
    ``staging`` (run/staged.py): told the plan, and when each of its rounds starts.

    Both phases run on the private duplicate, phase 1's rounds first: a rank's messages
    of one phase are all posted before those of the next, and MPI keeps the messages
    of one sender, tag and communicator in order, so the two never cross."""
    comm, out, src = state.private, args.out, args.src
    dt = out.datatype
    rank = comm.Get_rank()
    chunks, first_plan, plan = plan_of(name, comm.Get_size(), straggler, rank, out.count, out.extent,
                                       args.in_place, exactly_commutative(args.op, dt), dt.handle)
    if staging is not None:
        staging.start(plan, chunks, early=PHASE1.get(name) is not None and rank != straggler)
    scratch_bytes = max(plan.scratch_bytes, first_plan.scratch_bytes if first_plan else 0)
    with memory.lease(state) as lease:
        addresses = (src.address, out.address, memory.scratch(lease, scratch_bytes))
        local = memory.local(dt, args.op)
        if first_plan is not None:
            _phase1(first_plan, addresses, comm, args, transport, deadline, local, PHASE1[name])
        t_p1 = MPI.Wtime()
        first = _transport.execute(plan, addresses, comm, dt, args.op, transport, deadline, local, staging)
    return t_p1, first


def _phase1(plan, addresses, comm, args, transport, deadline, local, kind):
    try:
        _transport.execute(plan, addresses, comm, args.out.datatype, args.op, transport, deadline, local)
    except Pending as exc:
        exc.phase = f"phase 1 ({kind} among the early ranks)"
        raise
