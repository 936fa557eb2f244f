"""Who arrived when, for small communicators: a notice to every rank.

Below ``STRAGGLAR_ARRIVAL_GROUPS`` ranks (core/config.py) the arrival table is this
one, not the groups of decide/arrival.py: n-1 messages a rank and call, but only one
hop for the record and two for the roles, which is faster at a few ranks than the
groups' reports, tree and record rounds (docs/ARRIVAL.md has both measured).  It keeps
the same promises with the same parts:

- Notices: each tracked call, every rank sends a 24-byte notice (call, the time it
  entered the call on rank 0's clock, the table's token) to every other rank, before
  it looks at anything.
  A notice that small goes eagerly: it waits at the receiver without either side's
  progress, so a late rank holds up nobody's.
- Record: at the end of call ``seq`` (``settle``) every rank holds every notice of it,
  or is about to (each was sent before its sender took part in the call, which has
  finished here), so every rank builds the same ``Arrival`` record without waiting for
  anyone, and the call's own record is there when it returns (the report's).
- Roles ("arrival"): the coordinator (the first arrival of the previous record) waits
  until n-1 ranks, itself included, have arrived, names the one missing and sends that
  to every rank; the others wait only for that message.  Nobody forwards anything, so
  a late rank other than the coordinator holds up nobody; a late coordinator makes the
  early ranks wait, as in the groups' design.
- Timeouts: the ranks whose notice has not come are the missing ones.  A rank that
  waited holds every notice of a rank that arrived (sent first thing), so every such
  rank names the same missing ones.

Each sequence of calls has a table of its own with tags of its own (core/tags.py
``arrival``), on the duplicate its communicator's tables share.  Its waits are
generators that yield the receives they wait on (core/steps.py ``Wait``).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..core import tags
from ..core.steps import Wait
from .arrival import Arrival, coordinator
from .clock import stamp


class _Notices:
    """The notices of one call: one receive posted from every other rank."""

    def __init__(self, comm, seq, box, token, tag, others):
        self.comm, self.seq, self.box, self.token, self.tag = comm, seq, box, token, tag
        self.ranks = others          # every other rank
        self.requests = []
        for r in others:             # loops, not comprehensions: no frame per call (issue 47)
            self.requests.append(comm.Irecv(box[r], r, tag))
        self.heard = {}      # rank -> arrival time

    def poll(self):
        """Take in every notice already here; return the ranks of those new since the last
        poll.  MPI_Testsome until a pass brings nothing new: one test may move only part
        of what waits in a socket."""
        new = []
        while len(self.heard) < len(self.ranks):
            done = MPI.Request.Testsome(self.requests)
            if not done:
                break
            for i in done:
                r = self.ranks[i]
                if self.box[r, 2] != self.token:      # left over from a freed duplicate: not ours
                    self.requests[i] = self.comm.Irecv(self.box[r], r, self.tag)
                    continue
                new.append(r)
                if int(self.box[r, 0]) != self.seq:
                    raise RuntimeError(f"arrival notice of call {int(self.box[r, 0])} from rank {r} in call "
                                       f"{self.seq}: ranks called Allreduce in different sequences")
                self.heard[r] = float(self.box[r, 1])
        return new

    def next(self, until, need=1):
        """The step that waits for ``need`` more notices (or ``until``)."""
        live = []
        for req in self.requests:
            if req:
                live.append(req)
        return Wait(live, until, need)

    def cancel(self):
        for req in self.requests:
            if req:
                req.Cancel()
                req.Wait()


class NoticeTable:
    """The arrival table of a small communicator (the interface of arrival.GroupTable)."""
    protocol = "notices"

    def __init__(self, shared, sequence=0):
        self.comm, self.offset, self.token = shared.comm, shared.offset, shared.token
        self.n, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        self.others = [r for r in range(self.n) if r != self.rank]
        self.tags = tags.arrival(sequence, tags.NOTICE), tags.arrival(sequence, tags.DECISION)
        self.seq = 0
        self._boxes = (np.zeros((self.n, 3)), np.zeros((self.n, 3)))
        self._current = _Notices(self.comm, 0, self._boxes[0], self.token, self.tags[0], self.others)
        self._before = None             # notices of the previous call, until its record is built
        self._mine = {}                 # seq -> this rank's arrival time (current and previous)
        self._previous = None
        self._sends = []                # (request, buffer) still in flight
        self._sent = {}                 # seq -> arrival messages this rank sent for it
        self.sent_total = 0
        self.coordinator = 0
        self.place = 0

    def now(self):
        """This rank's time on rank 0's clock."""
        return MPI.Wtime() - self.offset

    def arrive(self, deadline=0.0, entry=None):
        """Generator: enter this call: send this rank's notice to every rank, stamped
        with ``entry`` (the MPI_Wtime at which the call was entered; None: now) on rank
        0's clock; returns how many ranks this rank knew to have arrived before it, or
        None if ``deadline`` passed while the previous call's notices were still coming."""
        t = stamp((MPI.Wtime() if entry is None else entry) - self.offset)
        note = np.array([self.seq, t, self.token])
        self._send(note, self.tags[0], self.others)
        self._mine[self.seq] = t
        if (yield from self.record_before(deadline)) is False:
            return None
        self.coordinator = coordinator(self._previous, self.n)
        self._current.poll()
        self.place = len(self._current.heard)
        return self.place

    def record_before(self, deadline=0.0):
        """Generator: the record of the previous call (after ``finish``: the call just
        ended), built (once) from its notices; False if ``deadline`` passes before they
        are all in."""
        before = self._before
        if before is not None:
            before.poll()
            while len(before.heard) < self.n - 1:
                if not (yield before.next(deadline, self.n - 1 - len(before.heard))):
                    return False
                before.poll()
            stamps = [(self._mine.pop(self._before.seq), self.rank)]
            for r, t in self._before.heard.items():
                stamps.append((t, r))
            stamps.sort()                       # by time, then rank
            times, order = zip(*stamps)
            self._previous = Arrival(order, times)
            self._before = None
        return self._previous

    def previous(self):
        """The record of the previous tracked call, or None before the first."""
        return self._previous

    def entered(self):
        """{rank: when it entered the current call (rank 0's clock)} for the notices here."""
        self._current.poll()
        return dict(self._current.heard)

    def heard(self):
        """Ranks whose notice for the current call has come."""
        self._current.poll()
        return set(self._current.heard)

    def straggler(self, deadline=0.0):
        """Generator: the rank that arrives last in this call, as the coordinator saw it;
        None if ``deadline`` (an MPI_Wtime, 0 = never) passes first.  The coordinator
        waits until n-1 ranks (itself included) have arrived and names the one missing;
        the others wait for its answer (seq, straggler, token)."""
        if self.rank == self.coordinator:
            notices, last = self._current, None
            if self.place == self.n - 1:
                last = self.rank              # everyone was here before the coordinator
            new, heard = [], notices.heard      # as arrive() polled them
            while last is None:
                if len(heard) == self.n - 1:      # two came at once: the later one
                    for r in new or heard:
                        if last is None or (heard[r], r) > (heard[last], last):
                            last = r
                elif len(heard) == self.n - 2:
                    for r in self.others:
                        if r not in heard:
                            last = r
                elif not (yield notices.next(deadline, self.n - 2 - len(heard))):
                    return None       # (waits for all it needs at once: one resume)
                else:
                    new = notices.poll()
            decision = np.array([self.seq, last, int(self.token)], np.int64)
            self._send(decision, self.tags[1], self.others)
            return last
        got = np.zeros(3, np.int64)
        while True:
            req = self.comm.Irecv(got, self.coordinator, self.tags[1])
            if not (yield Wait([req], deadline)):
                req.Cancel()
                req.Wait()
                return None
            req.Wait()
            if got[2] == int(self.token):
                break                        # else: left over from a freed duplicate
        if int(got[0]) != self.seq:
            raise RuntimeError(f"roles of call {int(got[0])} from rank {self.coordinator} in call {self.seq}: "
                               "ranks called Allreduce in different sequences")
        return int(got[1])

    def absent(self, seq, grace=None):
        """Generator (that waits for nothing): ranks that have not entered call ``seq``
        (the current or the previous one)."""
        notices = self._before if self._before is not None and seq == self._before.seq else self._current
        if notices.seq != seq:
            return []
        notices.poll()
        return [r for r in range(self.n) if r != self.rank and r not in notices.heard]
        yield  # pragma: no cover

    def finish(self):
        """This rank is done with the call's roles: listen for the next call's notices."""
        self._before = self._current
        self.seq += 1
        self._current = _Notices(self.comm, self.seq, self._boxes[self.seq % 2], self.token,
                                 self.tags[0], self.others)
        in_flight = []
        for sent in self._sends:
            if not sent[0].Test():
                in_flight.append(sent)
        self._sends = in_flight
        self._sent.pop(self.seq - 3, None)    # the counts of the last three calls stay

    #: Generator: after the plan, the call's record (truthy), or False past ``deadline``.
    #: Every rank sent its notice before it took part in the plan, which has ended here,
    #: so the notices are in or on their way: the record is there when the call returns.
    settle = record_before

    def sent_in(self, seq):
        """Arrival messages this rank sent for call ``seq``."""
        return self._sent.get(seq, 0)

    def _send(self, buf, tag, peers):
        requests = []
        for r in peers:
            requests.append(self.comm.Isend(buf, r, tag))
            self._sends.append((requests[-1], buf))
        # One turn of progress now: an MPI may only queue an Isend until the next progress
        # call, and a rank held up right after (descheduled) would deliver it late.
        MPI.Request.Testall(requests)
        self._sent[self.seq] = self._sent.get(self.seq, 0) + len(peers)
        self.sent_total += len(peers)

    def free(self):
        """Before the shared duplicate is freed: nothing of this table stays posted."""
        for notices in (self._before, self._current):
            if notices is not None:
                notices.cancel()
        for req, _ in self._sends:
            if not req.Test():
                req.Free()      # completes on its own; nobody waits for it
        self._sends = []
