"""Run a plan: the compiled transport (Cython, GIL released) or pure mpi4py.

Both interpret the same plan rows with the same rule (a round's messages are
posted once the previous round's are complete and its local work synchronised),
over a memory backend's local operations (_memory): host loops, or device kernels.
``run`` is a generator (core/steps.py): the compiled transport yields the plan's
machine (run/_interpreter.pyx ``Machine``), the Python one a ``Wait`` per round,
and whoever drives the call (the caller's thread, the progress thread) waits for them.

``STRAGGLAR_TRANSPORT=python`` forces the pure-mpi4py one; a build without the
extension falls back to it with a one-line warning.
"""
from __future__ import annotations

from mpi4py import MPI

from ..core import config as _config
from ..core import features as _features
from ..core import tags
from ..core.errors import Mismatch, Pending, size_message
from ..core.exchange import cancelled, unanswered
from ..core.steps import Wait
from ..memory.buffers import region
from .plan import COPY, RECV, REDUCE, SEND

from . import _interpreter


def name(settings=None) -> str:
    """The transport that ``execute`` uses now: "cython" or "python"."""
    choice = (settings or _config.current()).transport
    if choice not in ("cython", "python"):
        raise ValueError(f"STRAGGLAR_TRANSPORT must be 'cython' or 'python', not {choice!r}")
    return choice


def run(plan, addresses, comm, datatype, op, transport, deadline=0.0, local=None, rounds=None,
        tag0=0):
    """Generator: run ``plan``; returns the MPI_Wtime at which its first receive completed
    (or None).

    Past ``deadline`` (an MPI_Wtime; 0 = never) the outstanding requests are
    cancelled and ``Pending(peers)`` is raised.  ``local``: the memory backend's
    local operations (None: host memory; see _memory).  ``rounds``: None, or told
    ``begin(round)`` before each round's messages are posted (_staged).  Round r's
    messages carry tag ``tag0 + r % tags.ROUND_TAGS`` (the sequence's tags).
    """
    if plan.rows.shape[0] == 0:
        return None
    if transport == "cython":
        loop = _interpreter.loop_id(datatype, op)
        return (yield _interpreter.Machine(plan.rows, tuple(addresses), comm, datatype, op,
                                           plan.max_requests, loop, deadline, local, rounds, tag0))
    try:
        return (yield from _run_python(plan, addresses, comm, datatype, op, deadline,
                                       local or _HostLocal(datatype, op), rounds, tag0))
    except BaseException:
        if local is not None:
            local.sync()      # nothing queued runs on after the call has raised
        raise


def _run_python(plan, addresses, comm, datatype, op, deadline, local, rounds, tag0):
    extent = datatype.Get_extent()[1]
    posted, first, current, queued = [], None, None, False
    for kind, rnd, peer, buf, off, count, buf2, off2 in plan.rows.tolist():
        if rnd != current or kind in (REDUCE, COPY):
            # A round starts, and local work begins, only when this rank's messages are done.
            first = yield from _complete(posted, first, deadline, datatype)
            if queued and rnd != current:
                local.sync()   # the round's sends may read, its receives overwrite, queued work
                queued = False
            if rounds is not None and rnd != current:
                rounds.begin(rnd)
            current = rnd
        a = addresses[buf] + off
        if kind in (RECV, SEND):
            spec = region(a, count, datatype, extent)
            posted.append((_post(comm, kind, spec, peer, tag0 + rnd % tags.ROUND_TAGS), peer,
                           count if kind == RECV else -1, rnd))
        elif kind == REDUCE:
            local.reduce(a, addresses[buf2] + off2, count)
            queued = True
        elif kind == COPY:
            local.copy(a, addresses[buf2] + off2, count * extent)
            queued = True
    first = yield from _complete(posted, first, deadline, datatype)
    if queued:
        local.sync()
    return first


class _HostLocal:
    """The Python transport's local operations on host memory: MPI_Reduce_local, memmove."""

    def __init__(self, datatype, op):
        self.datatype, self.op, self.extent = datatype, op, datatype.Get_extent()[1]

    def reduce(self, a, b, count):
        for start, length in _features.pieces(count):
            skip = start * self.extent
            self.op.Reduce_local(region(a + skip, length, self.datatype, self.extent),
                                 region(b + skip, length, self.datatype, self.extent))

    def copy(self, a, b, nbytes):
        MPI.buffer.fromaddress(b, nbytes)[:] = MPI.buffer.fromaddress(a, nbytes)

    def sync(self):
        pass


def _post(comm, kind, spec, peer, tag):
    """Isend or Irecv; above INT_MAX elements on MPI-3.1, as one element of a derived
    type (the same element count and basic type at both ends, so they match)."""
    big = None
    if spec[1] > _features.INT_MAX and not _features.large_count():
        big = _features.big_type(spec[1], spec[2])
        spec = [spec[0], 1, big]
    try:
        return (comm.Irecv if kind == RECV else comm.Isend)(spec, peer, tag)
    finally:
        if big is not None:
            big.Free()      # a pending request keeps what it needs


def _complete(posted, first, deadline, datatype):
    """Generator: complete the posted requests (its driver tests and yields, never a
    blocking spin); every receive must bring the count the plan expects."""
    if not posted:
        return first
    reqs = [r for r, *_ in posted]
    recvs = [r for r, _, want, _ in posted if want >= 0]
    sends = [r for r, _, want, _ in posted if want < 0]
    statuses = [MPI.Status() for _ in reqs]
    try:
        done = (yield Wait(reqs, deadline)) and MPI.Request.Testall(reqs, statuses)
    except MPI.Exception as exc:
        yield from cancelled(recvs, sends=sends)
        raise _status_error(exc, posted, statuses, datatype) from None
    if not done:
        peers = sorted({p for (_, p, *_), live in zip(posted, unanswered(reqs)) if live})
        yield from cancelled(recvs, sends=sends)
        raise Pending(peers)
    for (_, peer, want, rnd), status in zip(posted, statuses):
        if want >= 0 and status.Get_elements(datatype) != want:
            raise Mismatch(size_message(peer, rnd, want, status.Get_elements(datatype), datatype))
    posted.clear()
    return MPI.Wtime() if first is None else first


def _status_error(exc, posted, statuses, datatype):
    """MPI_ERR_IN_STATUS turned into the error of the receive that failed."""
    if exc.Get_error_class() != MPI.ERR_IN_STATUS:
        return exc
    for (_, peer, want, rnd), status in zip(posted, statuses):
        err = status.Get_error()
        if want >= 0 and err not in (MPI.SUCCESS, MPI.ERR_PENDING):
            return Mismatch(size_message(peer, rnd, want, -1, datatype, err))
    return exc
