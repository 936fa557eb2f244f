"""Who arrived when: an arrival counter and table in an MPI window on rank 0.

Each tracked call, every rank takes a ticket (an atomic fetch-and-add) on one
counter that is never reset: call ``seq`` owns tickets ``seq*n .. seq*n+n-1``, so
``ticket - seq*n`` is the rank's place in the arrival order.  The rank then
writes ``(seq, rank)`` into slot ``place`` of the table for this call (one
int64, written atomically) and its arrival time beside it.  Two tables
alternate: nobody can finish call ``seq`` (and so write table ``seq+1``) before
every rank has read table ``seq-1``, because every rank reads it with its ticket.

Where the table lives: a shared-memory window when every rank is on one node and
the compiled extension is loaded (each access is one CPU atomic); otherwise an RMA
window (``MPI_Fetch_and_op``, ``MPI_Accumulate(REPLACE)``, ``MPI_Get_accumulate``),
which also serves ``STRAGGLAR_TRANSPORT=python``.

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
    def __init__(self, comm, transport="cython"):
        self.comm = comm
        self.n = n = comm.Get_size()
        words = 1 + 2 * n * 2        # counter, then 2 tables of n keys and n times
        self.table = (_Shared if _use_shared(comm, transport) else _Remote)(comm, words)
        self.seq = 0
        self.place = 0
        self._previous = None

    @property
    def kind(self):
        return self.table.kind

    def _key_disp(self, seq, place):
        return 1 + (seq % 2) * 2 * self.n + place

    def arrive(self):
        """Take a ticket and enter the table; returns this rank's place (0 = first).

        The table of the previous call is read together with the ticket (see ``previous``).
        """
        n = self.n
        ticket, before = self.table.ticket(self._key_disp(self.seq - 1, 0) if self.seq else 0,
                                           2 * n if self.seq else 0)
        self._previous = None if before is None else _record(before, n)
        place = ticket - self.seq * n
        if not 0 <= place < n:
            raise RuntimeError(f"arrival ticket {ticket} outside call {self.seq}: "
                               "ranks called Allreduce in different sequences")
        key = (self.seq + 1) * _KEY + self.comm.Get_rank()
        now = int(np.array([MPI.Wtime()], np.float64).view(np.int64)[0])
        disp = self._key_disp(self.seq, place)
        self.table.enter(disp, key, disp + n, now)
        self.place = place
        return place

    def tickets(self):
        """How many tickets have been taken so far, in all calls."""
        return int(self.table.read(0, 1)[0])

    def slots(self, seq):
        """The table of call ``seq`` by place: the rank there, or None while the place is empty."""
        keys = self.table.read(self._key_disp(seq, 0), self.n)
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
        self.table.free()


def _use_shared(comm, transport):
    """Shared memory when every rank is on this node and the compiled atomics are loaded
    (decided collectively: the window is made by all ranks alike)."""
    try:
        from . import _p2p
    except ImportError:
        _p2p = None
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_size() == comm.Get_size() and _p2p is not None and transport == "cython"
    node.Free()
    return comm.allreduce(local, op=MPI.LAND)


class _Remote:
    """The table in an RMA window on rank 0: any MPI, any number of nodes.
    A ticket (with a read) and an entry cost one RMA round trip each."""

    kind = "rma"

    def __init__(self, comm, words):
        size = words * 8 if comm.Get_rank() == 0 else 0
        self.win = MPI.Win.Allocate(size, 8, comm=comm)
        if comm.Get_rank() == 0:
            np.frombuffer(self.win.tomemory(), np.int64)[:] = 0
        comm.Barrier()
        self.win.Lock_all()

    def ticket(self, disp, count):
        """Add one to the counter; (its value before, ``count`` words at ``disp`` or None)."""
        one, ticket = np.ones(1, np.int64), np.zeros(1, np.int64)
        self.win.Fetch_and_op(one, ticket, 0, 0, MPI.SUM)
        words = None
        if count:
            words = np.zeros(count, np.int64)
            self.win.Get(words, 0, (disp, count, MPI.INT64_T))
        self.win.Flush(0)
        return int(ticket[0]), words

    def enter(self, key_disp, key, time_disp, time_bits):
        self.win.Accumulate(np.array([key], np.int64), 0, key_disp, MPI.REPLACE)
        self.win.Put(np.array([time_bits], np.int64), 0, time_disp)
        self.win.Flush(0)

    def read(self, disp, count):
        words = np.zeros(count, np.int64)
        self.win.Get_accumulate(np.zeros(count, np.int64), words, 0, (disp, count, MPI.INT64_T),
                                MPI.NO_OP)
        self.win.Flush(0)
        return words

    def free(self):
        self.win.Unlock_all()
        self.win.Free()


class _Shared:
    """The table in a shared-memory window on rank 0 when all ranks share a node: every
    access is one CPU atomic (``_p2p.fetch_add``/``store``/``load``), no message at all."""

    kind = "shared"

    def __init__(self, comm, words):
        from . import _p2p
        self.atomics = _p2p
        size = words * 8 if comm.Get_rank() == 0 else 0
        self.win = MPI.Win.Allocate_shared(size, 8, comm=comm)
        memory, _ = self.win.Shared_query(0)
        self.base = MPI.buffer(memory).address
        if comm.Get_rank() == 0:
            for i in range(words):
                self.atomics.store(self.base + 8 * i, 0)
        comm.Barrier()

    def ticket(self, disp, count):
        ticket = self.atomics.fetch_add(self.base, 1)
        return ticket, (self.read(disp, count) if count else None)

    def enter(self, key_disp, key, time_disp, time_bits):
        self.atomics.store(self.base + 8 * time_disp, time_bits)
        self.atomics.store(self.base + 8 * key_disp, key)

    def read(self, disp, count):
        return self.atomics.load(self.base + 8 * disp, count)

    def free(self):
        self.win.Free()


def _record(words, n):
    """The Arrival in a table read as 2n int64 words: n keys, then n times."""
    order = tuple(int(k % _KEY) for k in words[:n])
    times = tuple(float(t) for t in np.asarray(words[n:], np.int64).view(np.float64))
    return Arrival(order, times)
