"""Who arrived when: an arrival counter and table in an MPI window on rank 0.

Each tracked call, every rank takes a ticket with ``MPI_Fetch_and_op`` on one
counter that is never reset: call ``seq`` owns tickets ``seq*n .. seq*n+n-1``, so
``ticket - seq*n`` is the rank's place in the arrival order.  The rank then
writes ``(seq, rank)`` into slot ``place`` of the table for this call (one
int64, written atomically with ``MPI_Accumulate(REPLACE)``) and its arrival time
beside it.  Two tables alternate: nobody can finish call ``seq`` (and so write
table ``seq+1``) before every rank has read table ``seq-1``, because every rank
reads it before it sends anything in call ``seq``.

- "arrival" roles: the rank holding the last place is the straggler; an early
  rank waits only until the other early ranks are in the table (phase 1 needs
  them anyway), never for the straggler.
- history: at the start of call ``seq`` the table of call ``seq-1`` is complete
  (that call has finished everywhere), so every rank reads the same data and
  takes the same decision without waiting for anyone.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

_KEY = 1 << 32   # table word = (seq + 1) * _KEY + rank


@dataclass(frozen=True)
class Arrival:
    """One finished call, as every rank sees it."""
    order: tuple        # ranks in arrival order
    times: tuple        # their MPI_Wtime at arrival, same order

    @property
    def last(self) -> int:
        return self.order[-1]

    @property
    def gap(self) -> float:
        """How long the last rank came after the one before it (seconds)."""
        return self.times[-1] - self.times[-2] if len(self.times) > 1 else 0.0


class Arrivals:
    def __init__(self, comm):
        self.comm = comm
        self.n = n = comm.Get_size()
        words = 1 + 2 * n * 2        # counter, then 2 tables of n keys and n times
        size = words * 8 if comm.Get_rank() == 0 else 0
        self.win = MPI.Win.Allocate(size, 8, comm=comm)
        if comm.Get_rank() == 0:
            np.frombuffer(self.win.tomemory(), np.int64)[:] = 0
        comm.Barrier()
        self.win.Lock_all()
        self.seq = 0
        self.place = 0
        self._previous = None

    def _key_disp(self, seq, place):
        return 1 + (seq % 2) * 2 * self.n + place

    def arrive(self):
        """Take a ticket and enter the table; returns this rank's place (0 = first).

        The table of the previous call is read in the same epoch as the ticket
        (see ``previous``): two RMA round trips per tracked call, not three.
        """
        one, ticket = np.ones(1, np.int64), np.zeros(1, np.int64)
        self.win.Fetch_and_op(one, ticket, 0, 0, MPI.SUM)
        before = None
        if self.seq > 0:
            before = np.zeros(2 * self.n, np.int64)
            self.win.Get(before, 0, (self._key_disp(self.seq - 1, 0), 2 * self.n, MPI.INT64_T))
        self.win.Flush(0)
        self._previous = None if before is None else _record(before, self.n)
        place = int(ticket[0]) - self.seq * self.n
        if not 0 <= place < self.n:
            raise RuntimeError(f"arrival ticket {int(ticket[0])} outside call {self.seq}: "
                               "ranks called Allreduce in different sequences")
        rank = self.comm.Get_rank()
        key = np.array([(self.seq + 1) * _KEY + rank], np.int64)
        now = np.array([MPI.Wtime()], np.float64)
        disp = self._key_disp(self.seq, place)
        self.win.Accumulate(key, 0, disp, MPI.REPLACE)
        self.win.Put(now, 0, disp + self.n)
        self.win.Flush(0)
        self.place = place
        return place

    def slots(self, seq):
        """The table of call ``seq`` by place: the rank there, or None while the place is empty."""
        keys = np.zeros(self.n, np.int64)
        disp = self._key_disp(seq, 0)
        self.win.Get_accumulate(np.zeros(self.n, np.int64), keys, 0, (disp, self.n, MPI.INT64_T),
                                MPI.NO_OP)
        self.win.Flush(0)
        return [int(k % _KEY) if k // _KEY == seq + 1 else None for k in keys]

    def early_order(self, deadline=0.0):
        """Ranks in the first n-1 places of this call (waits for them, not for the last);
        None if ``deadline`` (an MPI_Wtime, 0 = never) passes first."""
        while True:
            early = self.slots(self.seq)[:self.n - 1]
            if None not in early:
                return early
            if deadline and MPI.Wtime() > deadline:
                return None
            os.sched_yield()

    def straggler(self, deadline=0.0):
        """The rank that arrives last in this call: the one not among the first n-1."""
        if self.place == self.n - 1:
            return self.comm.Get_rank()
        early = self.early_order(deadline)
        if early is None:
            return None
        return next(r for r in range(self.n) if r not in set(early))

    def absent(self, seq):
        """Ranks that have not entered call ``seq``."""
        present = set(self.slots(seq))
        return [r for r in range(self.n) if r not in present]

    def previous(self):
        """The complete record of the last tracked call (read by ``arrive`` of this
        call), or None before the first."""
        return self._previous

    def finish(self):
        self.seq += 1

    def free(self):
        self.win.Unlock_all()
        self.win.Free()


def _record(words, n):
    """The Arrival in a table read as 2n int64 words: n keys, then n times."""
    order = tuple(int(k % _KEY) for k in words[:n])
    times = tuple(float(t) for t in words[n:].view(np.float64))
    return Arrival(order, times)
