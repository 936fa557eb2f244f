"""One decided call, run: phase 1 and the rank's plan (or the native call) in its memory."""
from __future__ import annotations

from mpi4py import MPI

from ..memory import device as _device
from ..memory.host import HOST
from ..schedule import PHASE1, chunk_bounds
from ..schedule.algorithms import CHUNKED
from . import hierarchical as _hierarchical
from . import staged as _staged
from . import transport as _transport
from .native import native
from .phases import exactly_commutative, plan_of, start_phase1, wait, wait_all

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
    return run_schedule(state, name, straggler, args, transport, deadline, MEMORY[args.route], staging)


def run_schedule(state, name, straggler, args, transport, deadline, memory, staging=None):
    """Phase 1 on the early ranks, then this rank's plan, in ``memory`` (a backend);
    ``staging`` (run/staged.py): told the plan, and when each of its rounds starts."""
    comm, out, src = state.private, args.out, args.src
    dt, extent = out.datatype, out.extent
    rank, n = comm.Get_rank(), comm.Get_size()
    chunks, plan = plan_of(name, n, straggler, rank, out.count, extent, args.in_place,
                           exactly_commutative(args.op, dt), dt.handle)
    scratch_bytes = plan.scratch_bytes
    kind = PHASE1.get(name)
    sub = state.early_comm(straggler, deadline) if kind else None  # every rank: same LRU order
    staged = bool(deadline)    # after a timeout MPI writes scratch, never the caller's buffer
    bounds = chunk_bounds(out.count, chunks) if sub is not None else None
    if sub is not None and (staged or args.in_place):
        phase1_count = out.count if kind == "allreduce" else max(b[1] for b in bounds)
        scratch_bytes = max(scratch_bytes, phase1_count * extent)
    if staging is not None:
        staging.start(plan, chunks, early=sub is not None)
    with memory.lease(state) as lease:
        scratch = memory.scratch(lease, scratch_bytes)
        if sub is not None:
            started = start_phase1(sub, kind, bounds, src, out, args.in_place, args.op, scratch, staged)
            wait(started.request, deadline, f"phase 1 ({kind} among the early ranks)",
                 [r for r in range(n) if r not in (rank, straggler)])
            started.finish(memory)
        t_p1 = MPI.Wtime()
        addresses = (src.address, out.address, scratch)
        first = _transport.execute(plan, addresses, comm, dt, args.op, transport, deadline,
                                   memory.local(dt, args.op), staging)
    return t_p1, first
