"""Who arrived when: arrival notices by eager point-to-point, times on one clock.

Each tracked call, every rank sends a 24-byte notice (the call's number, its
arrival time and the table's token) to every other rank on a private duplicate.  A message that small
goes eagerly: the send completes at the sender and the data waits at the
receiver without either side's progress, so a rank that is late, outside MPI,
holds up nobody's notice.  (An RMA window on one host does not have that
property across nodes: without asynchronous progress an accumulate to a host
that is computing waits for it; docs/ARRIVAL.md has the measurements.)

- Times: each rank reads ``MPI_Wtime`` and subtracts its clock's offset from
  rank 0's, estimated once at setup (``_clock.offsets``), so the times in a
  record are on one clock, whichever node they came from.
- History: at the start of call ``seq`` every rank holds every notice of call
  ``seq-1`` (each was sent before its sender took part in that call, which has
  finished here), so every rank builds the same ``Arrival`` record without
  waiting for anyone: ranks ordered by time.
- "arrival" roles need one answer on every rank while the straggler is still
  away, so one rank decides: the *coordinator*, the rank that came first in the
  previous record (rank 0 at first), so it is rarely the late one.  It waits
  until n-1 ranks (itself included) have arrived, names the one missing, and
  sends that to everyone; the others wait only for that message.  If the
  coordinator is itself the straggler, the call still has the right roles, but
  the early ranks wait for it (as a synchronous AllReduce would).
- Timeouts: the ranks whose notice has not come are the missing ones.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..core import tags
from .clock import offsets


_CLOCK_ROUNDS = 8


@dataclass(frozen=True)
class Arrival:
    """One finished call, as every rank sees it."""
    order: tuple        # ranks in arrival order
    times: tuple        # their arrival times on rank 0's clock, same order

    @property
    def last(self) -> int:
        return self.order[-1]

    @property
    def gap(self) -> float:
        """How long the last rank came after the one before it (seconds)."""
        return self.times[-1] - self.times[-2] if len(self.times) > 1 else 0.0


def coordinator(previous, n):
    """The rank that decides the roles of the next call: the first to arrive last time."""
    return 0 if previous is None else previous.order[0]


class _Notices:
    """The notices of one call: one receive posted from every other rank."""

    def __init__(self, comm, seq, box, token):
        self.comm, self.seq, self.box, self.token = comm, seq, box, token
        me = comm.Get_rank()
        self.ranks = [r for r in range(comm.Get_size()) if r != me]
        self.requests = [comm.Irecv(box[r], r, tags.NOTICE) for r in self.ranks]
        self.heard = {}      # rank -> arrival time

    @property
    def pending(self):
        return len(self.heard) < len(self.ranks)

    def poll(self):
        """Take in the notices that came since the last poll (one MPI_Testsome); return their ranks."""
        if not self.pending:
            return []
        new = []
        for i in MPI.Request.Testsome(self.requests) or ():
            r = self.ranks[i]
            if self.box[r, 2] != self.token:      # left over from a freed duplicate: not ours
                self.requests[i] = self.comm.Irecv(self.box[r], r, tags.NOTICE)
                continue
            new.append(r)
            if int(self.box[r, 0]) != self.seq:
                raise RuntimeError(f"arrival notice of call {int(self.box[r, 0])} from rank {r} in call "
                                   f"{self.seq}: ranks called Allreduce in different sequences")
            self.heard[r] = float(self.box[r, 1])
        return new

    def drain(self):
        """Take in every notice already here: poll until a pass brings nothing new (one
        test may move only part of what waits in a socket)."""
        while self.pending and self.poll():
            pass
        self.poll()

    def wait(self, count, deadline):
        """Poll until ``count`` notices are in; False if ``deadline`` (an MPI_Wtime) passes first."""
        while True:
            self.poll()
            if len(self.heard) >= count:
                return True
            if deadline and MPI.Wtime() > deadline:
                return False
            os.sched_yield()

    def cancel(self):
        for req in self.requests:
            if req:
                req.Cancel()
                req.Wait()


class Arrivals:
    def __init__(self, comm):
        self.comm = comm.Dup()          # our notices never meet the plans' messages
        self.n, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        self.offset = offsets(self.comm, _CLOCK_ROUNDS)
        self.seq = 0
        # Notices carry this table's token: one that a freed duplicate left in the MPI's
        # queue (the last call's notices may still be on the way when it is freed) can
        # be matched by a later duplicate that reuses the context id; it is dropped.
        self.token = float(self.comm.bcast(int.from_bytes(os.urandom(6), "little") + 1, root=0))
        self._boxes = (np.zeros((self.n, 3)), np.zeros((self.n, 3)))
        self._current = _Notices(self.comm, 0, self._boxes[0], self.token)
        self._before = None             # notices of the previous call, until its record is built
        self._mine = {}                 # seq -> this rank's arrival time (current and previous)
        self._previous = None
        self._sends = []                # (request, buffer) still in flight
        self.coordinator = 0
        self.place = 0

    def now(self):
        """This rank's time on rank 0's clock."""
        return MPI.Wtime() - self.offset

    def arrive(self, deadline=0.0):
        """Enter this call: send this rank's notice to every rank; returns how many ranks
        this rank knew to have arrived before it, or None if ``deadline`` passed while
        the previous call's notices were still coming."""
        if self.record_before(deadline) is False:
            return None
        self.coordinator = coordinator(self._previous, self.n)
        self._current.drain()
        # The time is read next to the send, not at entry: the coordinator names the rank
        # whose notice is missing, so a rank held up in between (descheduled on a busy
        # machine) must be late in the record too, and the notices heard came before it.
        t = self.now()
        self.place = len(self._current.heard)
        self._mine[self.seq] = t
        note = np.array([self.seq, t, self.token])
        self._send(note, tags.NOTICE, [r for r in range(self.n) if r != self.rank])
        return self.place

    def record_before(self, deadline=0.0):
        """The record of the previous call, built (once) from its notices; False if
        ``deadline`` passes before they are all in."""
        if self._before is not None:
            if not self._before.wait(self.n - 1, deadline):
                return False
            times = dict(self._before.heard)
            times[self.rank] = self._mine.pop(self._before.seq)
            order = tuple(sorted(times, key=lambda r: (times[r], r)))
            self._previous = Arrival(order, tuple(times[r] for r in order))
            self._before = None
        return self._previous

    def heard(self):
        """Ranks whose notice for the current call has come."""
        self._current.poll()
        return set(self._current.heard)

    def straggler(self, deadline=0.0):
        """The rank that arrives last in this call, as the coordinator saw it; None if
        ``deadline`` (an MPI_Wtime, 0 = never) passes first."""
        if self.rank == self.coordinator:
            last = self._decide(deadline)
            if last is not None:
                decision = np.array([self.seq, last, int(self.token)], np.int64)
                self._send(decision, tags.DECISION, [r for r in range(self.n) if r != self.rank])
            return last
        got = self._decision(deadline)
        if got is None:
            return None
        if int(got[0]) != self.seq:
            raise RuntimeError(f"roles of call {int(got[0])} from rank {self.coordinator} in call {self.seq}: "
                               "ranks called Allreduce in different sequences")
        return int(got[1])

    def _decision(self, deadline):
        """The coordinator's answer (seq, straggler, token); None if ``deadline`` passes."""
        got = np.zeros(3, np.int64)
        while True:
            req = self.comm.Irecv(got, self.coordinator, tags.DECISION)
            while not req.Test():
                if deadline and MPI.Wtime() > deadline:
                    req.Cancel()
                    req.Wait()
                    return None
                os.sched_yield()
            if got[2] == int(self.token):
                return got          # else: left over from a freed duplicate

    def _decide(self, deadline):
        """On the coordinator: the one rank missing once n-1 have arrived."""
        if self.place == self.n - 1:
            return self.rank            # everyone was here before the coordinator
        notices = self._current
        while True:
            new = notices.poll()
            if len(notices.heard) == self.n - 1:      # two came at once: the later one
                return max(new or notices.heard, key=lambda r: (notices.heard[r], r))
            if len(notices.heard) == self.n - 2:
                return next(r for r in range(self.n) if r != self.rank and r not in notices.heard)
            if deadline and MPI.Wtime() > deadline:
                return None
            os.sched_yield()

    def absent(self, seq):
        """Ranks that have not entered call ``seq`` (the current or the previous one)."""
        notices = self._before if self._before is not None and seq == self._before.seq else self._current
        if notices.seq != seq:
            return []
        notices.poll()
        return [r for r in range(self.n) if r != self.rank and r not in notices.heard]

    def previous(self):
        """The record of the previous tracked call, or None before the first."""
        return self._previous

    def finish(self):
        """This rank is done with the call's roles: listen for the next call's notices."""
        self._before = self._current
        self.seq += 1
        self._current = _Notices(self.comm, self.seq, self._boxes[self.seq % 2], self.token)
        self._sends = [(req, buf) for req, buf in self._sends if not req.Test()]

    def _send(self, buf, tag, peers):
        self._sends += [(self.comm.Isend(buf, r, tag), buf) for r in peers]

    def free(self):
        for notices in (self._before, self._current):
            if notices is not None:
                notices.cancel()
        for req, _ in self._sends:
            if not req.Test():
                req.Free()      # completes on its own; nobody waits for it
        self._sends = []
        self.comm.Free()
