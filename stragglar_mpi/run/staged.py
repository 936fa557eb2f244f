"""Device buffers without a CUDA-aware MPI: the call's plan runs in pinned host memory.

A transform of the call, not a second call of the host path: the roles are decided
once, the arrival round happens once, ``stats`` counts one call, and the messages
are those of the same plan on host buffers (so ranks may differ in where their
buffers live).  ``Staging`` wraps the call:

- the send buffer is copied into a pinned host buffer (``IN``) and the plan writes
  another (``OUT``);
- the early ranks (and algorithms without a plan of rounds: native, hierarchical)
  copy in the whole buffer at once, so phase 1 runs in host memory during the
  straggler's delay;
- the straggler, and every rank of an algorithm without phase 1, copies in chunk by
  chunk: before each round starts (``begin``), the chunks it reads must be in and the
  next round's are queued, so the copy of round r+1's data overlaps round r;
- every chunk of the result is copied back as soon as a round ends after which the plan
  no longer writes it (``end``), while the later rounds run; the rest when the call ends.

Copies run on two streams (in and out) and are complete when the call returns.
After a failure no copy into the caller's buffer is left queued, none is started,
and the host buffers are never reused (MPI may still write them).
"""
from __future__ import annotations

from mpi4py import MPI

from ..memory import device as _device
from ..bind.args import Args
from ..memory.buffers import Message
from ..memory.host import address
from .plan import BUF, BUF2, COUNT, IN, KIND, OFFSET, OFFSET2, OUT, RECV, ROUND, SEND
from ..schedule import chunk_bounds


class Staging:
    """The host side of one staged call: ``args`` (host Messages) and the copies."""

    def __init__(self, state, args, whole):
        self.src, self.out, self.whole = args.src, args.out, whole
        self.lease = _device.DEVICE.lease(state)
        self.ins, self.outs = _device.stream(), _device.stream()
        self.error, self.caller = None, args
        nbytes = args.out.count * args.out.extent
        self.spans = [(0, nbytes)]        # byte ranges copied as units (the plan's chunks)
        self.needs, self.final, self.rounds = {}, [-1], []
        self.fetched, self.delivered = {}, set()

    def __enter__(self):
        self.lease.__enter__()
        a, out = self.caller, self.out
        nbytes = out.count * out.extent
        self.h_in = address(self.lease.take("pinned", nbytes))
        self.h_out = address(self.lease.take("pinned", nbytes))
        src_m, out_m = (Message(MPI.buffer.fromaddress(h, nbytes), None, h, out.count, out.datatype, out.extent)
                        for h in (self.h_in, self.h_out))
        self.args = Args(a.n, a.policy, [src_m.buf, out.count, out.datatype],
                         [out_m.buf, out.count, out.datatype], a.op, False, out_m, src_m, a.name,
                         a.signature, route="host")
        if self.whole:
            self._fetch_all()
        return self

    def start(self, plan, chunks, early):
        """Before phase 1: which chunks each round reads and when each is final."""
        extent = self.out.extent
        self.spans = [(off * extent, n * extent) for off, n in chunk_bounds(self.out.count, chunks)]
        self.needs, self.final = _reads_and_last_writes(plan.rows, self.spans, extent)
        self.rounds = sorted(self.needs)
        if early:
            self._fetch_all()
        elif self.rounds:
            self._fetch(self.needs[self.rounds[0]])

    def begin(self, rnd):
        """Round ``rnd`` starts: wait for its data, queue the next's."""
        if self.whole:
            return
        self._fetch(self.needs.get(rnd, ()))
        for c in self.needs.get(rnd, ()):
            self.fetched[c].synchronize()
        later = [r for r in self.rounds if r > rnd]
        if later:
            self._fetch(self.needs[later[0]])

    def end(self, rnd):
        """Round ``rnd`` ended: deliver what the plan no longer writes."""
        self._deliver(c for c, last in enumerate(self.final) if last <= rnd)

    def _fetch_all(self):
        self.whole = True
        self._fetch(range(len(self.spans)))
        self.ins.synchronize()

    def _fetch(self, chunks):
        for c in chunks:
            if c not in self.fetched:
                off, nbytes = self.spans[c]
                _device.to_host(self.h_in + off, self.src, off, nbytes, self.ins)
                self.fetched[c] = _device.event(self.ins)

    def _deliver(self, chunks):
        for c in chunks:
            if c not in self.delivered:
                off, nbytes = self.spans[c]
                _device.from_host(self.h_out + off, self.out, off, nbytes, self.outs)
                self.delivered.add(c)

    def __exit__(self, kind, exc, tb):
        try:
            if exc is None:
                self._deliver(range(len(self.spans)))
        finally:
            self.ins.synchronize()      # no copy into the caller's buffer is left queued
            self.outs.synchronize()
            self.lease.__exit__(kind, exc, tb)
        return False


def _reads_and_last_writes(rows, spans, extent):
    """({round: chunks read from IN}, [last round that writes chunk c of OUT, or -1])."""
    needs, final = {}, [-1] * len(spans)
    for row in rows.tolist():
        kind, rnd, nbytes = row[KIND], row[ROUND], row[COUNT] * extent
        read = needs.setdefault(rnd, set())
        if kind != RECV and row[BUF] == IN:
            read.update(_overlapping(spans, row[OFFSET], nbytes))
        # what it writes: a receive its own region, a reduce or a copy the second one
        buf, off = (row[BUF], row[OFFSET]) if kind == RECV else (row[BUF2], row[OFFSET2])
        if kind != SEND and buf == OUT:
            for c in _overlapping(spans, off, nbytes):
                final[c] = max(final[c], rnd)
    return {r: sorted(cs) for r, cs in needs.items()}, final


def _overlapping(spans, off, nbytes):
    """Chunks whose byte span meets [off, off + nbytes)."""
    return [c for c, (start, length) in enumerate(spans)
            if length and nbytes and start < off + nbytes and off < start + length]
