"""Device buffers without a CUDA-aware MPI: the call runs in pinned host memory.

A transform of the call's plan, not a second call of the host path: the roles are
decided once, the arrival round happens once and ``stats`` counts one call.

- The early ranks stage their whole buffer to host memory at once and run phase 1
  there, during the straggler's delay (one nonblocking phase 1 per piece, all
  started together: each piece is an AllReduce of its own, with its own chunks).
- Then, piece by piece, three stages overlap: the device-to-host copy of the next
  piece (on the straggler, and on every rank of an algorithm without phase 1), the
  plan of this piece in host memory, and the host-to-device copy of the result of
  the previous piece.
- Algorithms whose plan is not cut in pieces (native, hierarchical) copy the whole
  buffer in, run in host memory, and copy the result out (``whole``).

After a failure the host buffers are never reused (MPI may still write them), and
no copy into the caller's buffer is left queued.
"""
from __future__ import annotations

from contextlib import contextmanager

from mpi4py import MPI

from . import _cuda, _device, _transport
from ._args import Args
from ._buffers import Message
from ._memory import HOST, address
from ._phases import exactly_commutative, plan_of, region, wait_all
from .schedule import PHASE1, chunk_bounds

PIPELINED = ("stragglar", "direct", "ring", "rhd")


def pieces(count, extent):
    """(first element, count) of each piece; one empty piece for an empty buffer."""
    per = max(1, _cuda.piece_bytes() // max(extent, 1))
    return [(lo, min(per, count - lo)) for lo in range(0, count, per)] or [(0, 0)]


def run(state, name, straggler, args, transport, deadline):
    """Phase 1 and the plan of ``name`` on staged pieces; (end of phase 1, first receive)."""
    comm, out = state.private, args.out
    rank, n, extent = comm.Get_rank(), comm.Get_size(), out.extent
    kind = PHASE1.get(name)
    early = kind is not None and rank != straggler
    cuts = pieces(out.count, extent)
    with _device.DEVICE.lease(state) as lease, _Copies(args) as copies:
        host = address(lease.take("pinned", out.count * extent))
        sub = state.early_comm(straggler, deadline) if kind else None  # every rank: same LRU order
        if early:
            copies.fetch(host, 0, out.count)
            copies.fetched()
            _phase1(sub, kind, cuts, args, host, lease, deadline,
                    [r for r in range(n) if r not in (rank, straggler)])
        t_p1 = MPI.Wtime()
        first = _pipeline(state, name, straggler, args, transport, deadline, cuts, host, early, copies,
                          lease)
    return t_p1, first


def _pipeline(state, name, straggler, args, transport, deadline, cuts, host, early, copies, lease):
    """The plan of each piece: fetch the next piece, run this one, deliver it."""
    comm, out = state.private, args.out
    rank, n, extent, dt = comm.Get_rank(), comm.Get_size(), out.extent, out.datatype
    commutative = exactly_commutative(args.op, dt)
    plans = [plan_of(name, n, straggler, rank, count, extent, True, commutative, dt.handle)[1]
             for _, count in cuts]
    scratch = HOST.scratch(lease, max(p.scratch_bytes for p in plans))
    first = None
    if not early:
        copies.fetch(host, *cuts[0])
    for i, ((lo, count), plan) in enumerate(zip(cuts, plans)):
        if not early:
            copies.fetched()
            if i + 1 < len(cuts):
                copies.fetch(host, *cuts[i + 1])
        at = host + lo * extent
        got = _transport.execute(plan, (at, at, scratch), comm, dt, args.op, transport, deadline)
        first = got if first is None else first
        copies.deliver(host, lo, count)
    return first


def _phase1(sub, kind, cuts, args, host, lease, deadline, peers):
    """Phase 1 of every piece among the early ranks, started at once, in host memory."""
    if sub.Get_size() == 1:     # one early rank: its own data is phase 1's result
        return
    out, op = args.out, args.op
    dt, extent, me = out.datatype, out.extent, sub.Get_rank()
    shares = [chunk_bounds(count, sub.Get_size()) for _, count in cuts]
    landing = address(lease.take("pinned", sum(b[me][1] for b in shares) * extent)) if kind != "allreduce" else 0
    requests, moves, at = [], [], landing
    for (lo, count), bounds in zip(cuts, shares):
        piece = host + lo * extent
        if kind == "allreduce":
            requests.append(sub.Iallreduce(MPI.IN_PLACE, region(piece, count, dt, extent), op))
            continue
        offset, length = bounds[me]
        requests.append(sub.Ireduce_scatter(region(piece, count, dt, extent), region(at, length, dt, extent),
                                            [b[1] for b in bounds], op))
        moves.append((piece + offset * extent, at, length * extent))
        at += length * extent
    wait_all(requests, deadline, f"phase 1 ({kind} among the early ranks, {len(cuts)} pieces)", peers)
    for dst, src, nbytes in moves:
        HOST.copy(dst, src, nbytes)


class _Copies:
    """The copies of one staged call: in on one stream, out on another."""

    def __init__(self, args):
        self.src, self.out = args.src, args.out
        self.ins, self.outs, self._pending = _device.stream(), _device.stream(), None

    def fetch(self, host, lo, count):
        """Queue the copy of elements [lo, lo + count) of the send buffer to ``host``."""
        extent = self.src.extent
        _device.to_host(host + lo * extent, self.src, lo * extent, count * extent, self.ins)
        self._pending = _device.event(self.ins)

    def fetched(self):
        """Wait for the last queued fetch."""
        if self._pending is not None:
            self._pending.synchronize()
            self._pending = None

    def deliver(self, host, lo, count):
        """Queue the copy of elements [lo, lo + count) of the result into the receive buffer."""
        extent = self.out.extent
        _device.from_host(host + lo * extent, self.out, lo * extent, count * extent, self.outs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.ins.synchronize()      # no copy into the caller's buffer is left queued
        self.outs.synchronize()
        return False


@contextmanager
def whole(state, args):
    """Host Args over a pinned copy of the whole send buffer (in place); the result is
    copied into the receive buffer when the body completes."""
    out, nbytes = args.out, args.out.count * args.out.extent
    with _device.DEVICE.lease(state) as lease, _Copies(args) as copies:
        host = address(lease.take("pinned", nbytes))
        copies.fetch(host, 0, out.count)
        copies.fetched()
        msg = Message(MPI.buffer.fromaddress(host, nbytes), None, host, out.count, out.datatype, out.extent)
        spec = [msg.buf, out.count, out.datatype]
        yield Args(args.n, args.policy, None, spec, args.op, True, msg, msg, args.name, args.signature,
                   route="host")
        copies.deliver(host, 0, out.count)
