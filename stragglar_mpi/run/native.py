"""The MPI's own AllReduce, run for the library (small buffers, ops we do not reduce, auto's pick).

A blocking call without a deadline calls it on the caller's communicator, as the
caller would.  Otherwise (a deadline; a nonblocking operation, ``turn`` not None) it is
an ``Iallreduce`` on the private duplicate, issued in its turn among the collectives
there (core/turns.py ``Turns``) and waited as a step (core/steps.py), on scratch memory
copied out on success: after a timeout the request that cannot be cancelled writes
there, not into the caller's buffer.
"""
from __future__ import annotations

from mpi4py import MPI

from ..core import features as _features
from ..core.collective import issue
from ..core.errors import Pending
from ..core.steps import complete
from ..memory.buffers import region


def native(comm, seq, args, memory, deadline, turn):
    """Generator: the native AllReduce of the call (``comm``: the caller's communicator)."""
    if not deadline and turn.blocking:
        turn.release()
        for sendbuf, recvbuf in _pieces(args):
            MPI.Intracomm.Allreduce(comm, sendbuf, recvbuf, args.op)
        return
    if not args.out.datatype.is_predefined:
        sendbuf, recvbuf = _specs(args)
        yield from _issued(seq, sendbuf, recvbuf, args.op, deadline, turn)
        return
    caller = comm if turn.blocking and args.native_from_c else None
    yield from _on_scratch(seq, args, memory, deadline, turn, caller)


def _issued(seq, sendbuf, recvbuf, op, deadline, turn, caller=None):
    """Generator: an Iallreduce on the private duplicate in its turn, waited under
    ``deadline``; or on ``caller``, the caller's communicator, where the compiled entry
    runs a native call under a timeout (call/_entry.pyx), and as it does: untracked, the
    stall watchdogs name who is missing (``watch``)."""
    if caller is not None:
        request = MPI.Intracomm.Iallreduce(caller, sendbuf, recvbuf, op)
    else:
        request = yield from issue(turn, lambda: MPI.Intracomm.Iallreduce(seq.private, sendbuf, recvbuf, op),
                                   deadline)
    if not (yield from complete([request], deadline)):
        raise Pending((), "the native AllReduce", watch=caller is not None)


def _specs(args):
    """(send, receive) specs of the whole call: the caller's own for host memory."""
    if args.route == "host":
        return MPI.IN_PLACE if args.in_place else args.sendbuf, args.recvbuf
    send = MPI.IN_PLACE if args.in_place else args.src.part(0, args.src.count)
    return send, args.out.part(0, args.out.count)


def _pieces(args):
    """The call's buffers, or on MPI-3.1 above INT_MAX elements pieces that it accepts."""
    cuts = _features.pieces(args.out.count)
    if len(cuts) == 1:
        return [_specs(args)]
    return [(MPI.IN_PLACE if args.in_place else args.src.part(start, length), args.out.part(start, length))
            for start, length in cuts]


def _on_scratch(seq, args, memory, deadline, turn, caller=None):
    """Generator: the native AllReduce in ``memory``'s scratch, copied out on success."""
    out, src = args.out, args.src
    nbytes, dt = out.count * out.extent, out.datatype
    holes = dt.Get_size() != out.extent       # pair types: keep the caller's padding
    with memory.lease(seq) as lease:
        scratch = memory.scratch(lease, 2 * nbytes if holes and not args.in_place else nbytes)
        memory.copy(scratch, (out if holes else src).address, nbytes)
        send = MPI.IN_PLACE
        if holes and not args.in_place:
            send = region(scratch + nbytes, out.count, dt, out.extent)
            memory.copy(scratch + nbytes, src.address, nbytes)
        yield from _issued(seq, send, region(scratch, out.count, dt, out.extent), args.op,
                           deadline, turn, caller)
        memory.copy(out.address, scratch, nbytes)
