"""``Allreduce`` on GPU buffers: CUDA-aware MPI with device kernels, or host staging.

Stream semantics are mpi4py's: the caller has synchronized the device before the
call; when the call returns the result is complete in the receive buffer.

A CUDA-aware MPI (see ``_cuda.cuda_aware``) gets device pointers: phase 1 is MPI's
ReduceScatter on them and the per-rank plan runs here, its REDUCE and COPY rows as
device kernels and copies.  Otherwise, and for (dtype, op) pairs without a kernel,
the buffer is staged through pinned host memory in pieces: while piece k goes
through the host ``Allreduce``, piece k+1 is copied in and piece k-1 copied out.
"""
from __future__ import annotations

from itertools import groupby

import numpy as np
from mpi4py import MPI

from . import _config, _cuda, _kernels, _transport
from ._args import bytes_as_unsigned_char, check_op, check_straggler, decide
from ._buffers import Message, is_in_place, resolve, validate
from ._errors import Pending
from ._plan import COPY, RECV, REDUCE, SEND
from .schedule import PHASE1, chunk_bounds

_SLOTS = 3  # staged pieces in flight: one copied in, one reduced, one copied out


def is_device_call(sendbuf, recvbuf) -> bool:
    """Whether either buffer of an ``Allreduce`` call lives on a GPU."""
    return _cuda.is_device(_object(recvbuf)) or (
        not is_in_place(sendbuf) and _cuda.is_device(_object(sendbuf)))


def _object(spec):
    """The array of a buffer spec (any form; a malformed one is left to the host checks)."""
    return spec[0] if isinstance(spec, (list, tuple)) and spec else spec


def allreduce(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """``Allreduce`` with device buffers; raises what the host path raises for bad input."""
    name = _config.algorithm(algorithm)
    policy = check_straggler(straggler, comm.Get_size())
    in_place = is_in_place(sendbuf)
    send = None if in_place else _Side(sendbuf)
    recv = _Side(recvbuf)
    validate(MPI.IN_PLACE if in_place else send.standin_spec, recv.standin_spec, op)
    out = recv.resolve(readonly=False)
    src = out if in_place else send.resolve(readonly=True)
    src, out = bytes_as_unsigned_char(src, out, op, in_place)
    if _use_kernels(send, recv, out.datatype, op):
        return _aware(comm, name, policy, src, out, op, in_place)
    _staged(comm, src, out, op, straggler, name)


class _Side:
    """One buffer spec: the caller's object and a host stand-in of the same layout."""

    def __init__(self, spec):
        obj = _object(spec)
        self.desc = _cuda.describe(obj)
        self.standin = self.desc.standin() if self.desc else obj
        self.standin_spec = [self.standin, *spec[1:]] if isinstance(spec, (list, tuple)) else self.standin

    def resolve(self, readonly):
        """The ``Message`` of this side, its address on the device for a device buffer."""
        msg = resolve(self.standin_spec, readonly)
        if self.desc is None:
            return msg
        address = self.desc.ptr + (msg.address - self.standin.ctypes.data)
        return Message(None, self.desc.obj, address, msg.count, msg.datatype)


def _use_kernels(send, recv, datatype, op):
    """CUDA-aware MPI, both buffers on the device, and a kernel for (dtype, op)."""
    if recv.desc is None or (send is not None and send.desc is None) or not _cuda.cuda_aware()[0]:
        return False
    if not datatype.is_predefined or datatype in _PAIR_DATATYPES:
        return False
    try:
        dtype = np.dtype(datatype.tocode())
    except (ValueError, TypeError):
        return False
    return _kernels.supports(dtype, _kernels.op_name(op))


_PAIR_DATATYPES = [getattr(MPI, n) for n in ("FLOAT_INT", "DOUBLE_INT", "LONG_INT", "SHORT_INT",
                                             "LONG_DOUBLE_INT", "TWOINT", "INT_INT") if hasattr(MPI, n)]


# --- staged: pinned host memory, in pieces -------------------------------------------------
def _staged(comm, src, out, op, straggler, algorithm):
    from ._allreduce import Allreduce as host_allreduce
    cuda = _cuda.numba_cuda()
    dt, extent = out.datatype, out.extent
    pieces = _pieces(out.count, extent)
    slot_bytes = pieces[0][1] * extent
    slots = _slots(min(_SLOTS, len(pieces)), slot_bytes)
    ins, outs = cuda.stream(), cuda.stream()
    fetched, freed = {}, {}
    try:
        _fetch(src, pieces, 0, slots, ins, fetched, freed)
        for i, (lo, n) in enumerate(pieces):
            if i + 1 < len(pieces):
                _fetch(src, pieces, i + 1, slots, ins, fetched, freed)
            fetched.pop(i).synchronize()
            slot = slots[i % len(slots)][:n * extent]
            host_allreduce(comm, MPI.IN_PLACE, [slot, n, dt], op, straggler=straggler, algorithm=algorithm)
            _copy(slot, out, lo * extent, to_host=False, stream=outs)
            freed[i % len(slots)] = _record(outs)
    finally:   # no copy into the caller's buffer is left queued when the call raises
        ins.synchronize()
        outs.synchronize()


def _pieces(count, extent):
    """(first element, count) of each staged piece; one empty piece for an empty buffer."""
    per = max(1, _cuda.piece_bytes() // max(extent, 1))
    return [(lo, min(per, count - lo)) for lo in range(0, count, per)] or [(0, 0)]


def _slots(k, nbytes):
    host = _cuda.pinned(k * nbytes)
    return [host[j * nbytes:(j + 1) * nbytes] for j in range(k)]


def _fetch(src, pieces, i, slots, stream, fetched, freed):
    """Queue the copy of piece ``i`` into its slot, once that slot's last copy-out is done."""
    k = i % len(slots)
    if k in freed:
        freed.pop(k).synchronize()
    lo, n = pieces[i]
    _copy(slots[k][:n * src.extent], src, lo * src.extent, to_host=True, stream=stream)
    fetched[i] = _record(stream)


def _copy(slot, msg, offset, to_host, stream):
    """Copy between a host slot and ``msg`` (device or host) at byte ``offset``."""
    nbytes = slot.nbytes
    if not nbytes:
        return
    if msg.buf is not None:  # a host buffer in a mixed call
        region = np.frombuffer(MPI.buffer.fromaddress(msg.address + offset, nbytes), np.uint8)
        src, dst = (region, slot) if to_host else (slot, region)
        dst[:] = src
        return
    view = _cuda.device_bytes(msg.address + offset, nbytes, msg.obj)
    if to_host:
        view.copy_to_host(slot, stream=stream)
    else:
        view.copy_to_device(slot, stream=stream)


def _record(stream):
    event = _cuda.numba_cuda().event()
    event.record(stream)
    return event


# --- CUDA-aware: device pointers to MPI, reductions as kernels -----------------------------
def _aware(comm, name, policy, src, out, op, in_place):
    """The body of ``_allreduce.Allreduce`` with device pointers (keep the two in step)."""
    from . import _allreduce as host
    t_call, n = MPI.Wtime(), comm.Get_size()
    timeout = _config.current().timeout
    deadline = t_call + timeout if timeout else 0.0
    name = decide(name, n, out, op)
    state = host.state_of(comm, deadline)
    straggler = None
    if name != "native" or deadline:
        if name != "native":
            check_op(op, out.datatype)
        name, straggler = host._roles(state, name, policy, out.count * out.extent, n,
                                      tracked=bool(deadline), deadline=deadline)
    if name == "hierarchical":   # not written for device pointers yet: the flat schedule
        name = "stragglar"
    if name == "native":
        send = MPI.IN_PLACE if in_place else _region(src, 0, src.count)
        host._wait(MPI.Intracomm.Iallreduce(state.private, send, _region(out, 0, out.count), op),
                   deadline, "the native AllReduce")
        host._record(state, name, None, policy, t_call, t_call, None, MPI.Wtime(), "cuda")
        return
    t_p1, first = _run_schedule(host, state, name, straggler, src, out, op, in_place, deadline)
    host._record(state, name, straggler, policy, t_call, t_p1, first, MPI.Wtime(), "cuda")


def _run_schedule(host, state, name, straggler, src, out, op, in_place, deadline=0.0):
    """Phase 1 on the early ranks, then this rank's plan, all on device memory."""
    comm, dt, extent = state.private, out.datatype, out.extent
    rank, n = comm.Get_rank(), comm.Get_size()
    chunks, plan = host._plan(name, n, straggler, rank, out.count, extent, in_place,
                              host._exactly_commutative(op, dt), dt.handle)
    scratch_bytes = plan.scratch_bytes
    kind = PHASE1.get(name)
    bounds = chunk_bounds(out.count, chunks)
    sub = state.early_comm(straggler, deadline) if kind else None  # every rank: same LRU order
    if sub is not None:
        scratch_bytes = max(scratch_bytes, max(b[1] for b in bounds) * extent)
    scratch = _cuda.scratch(scratch_bytes)
    stream = _cuda.numba_cuda().stream()
    if sub is not None:
        _phase1(sub, kind, bounds, src, out, op, in_place, scratch, stream,
                lambda req: host._wait(req, deadline, f"phase 1 ({kind})"))
    t_p1 = MPI.Wtime()
    addresses = (src.address, out.address, _cuda.address_of(scratch))
    views = (_cuda.device_bytes(src.address, src.count * extent, src.obj),
             _cuda.device_bytes(out.address, out.count * extent, out.obj), scratch)
    first = _execute(plan, addresses, views, comm, dt, _kernels.op_name(op), stream, deadline)
    return t_p1, first


def _phase1(sub, kind, bounds, src, out, op, in_place, scratch, stream, wait):
    """ReduceScatter (AllReduce for "direct") among the early ranks; MPI reduces on the device."""
    count = out.count
    if kind == "allreduce":
        wait(sub.Iallreduce(MPI.IN_PLACE if in_place else _region(src, 0, count), _region(out, 0, count), op))
        return
    offset, length = bounds[sub.Get_rank()]
    counts = [b[1] for b in bounds]
    if not in_place:
        wait(sub.Ireduce_scatter(_region(src, 0, count), _region(out, offset, length), counts, op))
        return
    nbytes = length * out.extent
    recv = [MPI.buffer.fromaddress(_cuda.address_of(scratch), nbytes), length, out.datatype]
    wait(sub.Ireduce_scatter(_region(out, 0, count), recv, counts, op))
    if nbytes:
        dst = _cuda.device_bytes(out.address + offset * out.extent, nbytes, out.obj)
        dst.copy_to_device(scratch[:nbytes], stream=stream)
        stream.synchronize()


def _region(msg, offset, count):
    """A [buffer, count, datatype] spec of ``count`` elements at element ``offset``."""
    extent = msg.extent
    return [MPI.buffer.fromaddress(msg.address + offset * extent, count * extent), count, msg.datatype]


def _complete(reqs, first, deadline=0.0, peers=()):
    """Complete ``reqs`` with a test-and-yield loop; the time of the first completion.
    Past ``deadline`` the requests are cancelled and ``Pending`` raised."""
    if not reqs:
        return first
    if not _transport.wait(reqs, deadline):
        _transport.cancel(reqs)
        raise Pending(sorted(set(peers)))
    reqs.clear()
    return MPI.Wtime() if first is None else first


def _execute(plan, addresses, views, comm, dt, opname, stream, deadline=0.0):
    """Walk the plan round by round: messages on device pointers, then kernels and copies."""
    extent, dtype = dt.Get_extent()[1], np.dtype(dt.tocode())
    first = None
    for rnd, rows in groupby(plan.rows.tolist(), key=lambda row: row[1]):
        reqs, peers, queued = [], [], False
        for kind, _, peer, buf, off, count, buf2, off2 in rows:
            nbytes = count * extent
            if kind in (RECV, SEND):
                spec = [MPI.buffer.fromaddress(addresses[buf] + off, nbytes), count, dt]
                post = comm.Irecv if kind == RECV else comm.Isend
                reqs.append(post(spec, peer, rnd % 32768))
                peers.append(peer)
                continue
            first = _complete(reqs, first, deadline, peers)
            a, b = views[buf][off:off + nbytes], views[buf2][off2:off2 + nbytes]
            if kind == REDUCE:
                _kernels.reduce(a.view(dtype), b.view(dtype), opname, stream)
            elif kind == COPY:
                b.copy_to_device(a, stream=stream)
            queued = True
        first = _complete(reqs, first, deadline, peers)
        if queued:  # the next round may send what these rows wrote
            stream.synchronize()
    return first

