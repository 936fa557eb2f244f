"""Turns: the MPI collectives on a communicator's private duplicate (a native AllReduce,
auto's agreement, the argument check's gather) issued in call order on every rank,
across its sequences (core/sequences.py)."""
from __future__ import annotations

import threading

from mpi4py import MPI

from .errors import Pending
from .steps import pause


class Turns:
    """Collectives on the private duplicate in call order, across sequences.

    Every nonblocking operation takes a ticket at its call (``take``: the same count on
    every rank) and gives it back (``release``) once it has issued its collective, or
    once it knows it has none; an operation may issue its collective when every
    earlier ticket is back (``mine``).  A blocking call, which comes after all of
    them, waits for ``idle``."""

    def __init__(self):
        self.issued, self.next, self._back = 0, 0, set()
        self._lock = threading.Lock()

    def take(self):
        with self._lock:
            self.issued += 1
            return self.issued - 1

    def release(self, ticket):
        with self._lock:
            self._back.add(ticket)
            while self.next in self._back:
                self._back.discard(self.next)
                self.next += 1

    def mine(self, ticket):
        return self.next == ticket

    @property
    def idle(self):
        return self.next == self.issued


class Turn:
    """One call's place among the collectives on the private duplicate: a nonblocking
    operation's ticket, or (``ticket`` None) a blocking call, whose turn comes once no
    earlier operation holds one."""
    POLL = 1e-4     # seconds between looks while an earlier operation holds the turn

    def __init__(self, turns, ticket=None):
        self.turns, self.ticket, self.back = turns, ticket, ticket is None

    @property
    def blocking(self):
        return self.ticket is None

    def ready(self):
        return self.turns.idle if self.ticket is None else self.turns.mine(self.ticket)

    def wait(self, deadline=0.0):
        """Generator: until this call may issue its collective."""
        while not self.ready():
            now = MPI.Wtime()
            if deadline and now > deadline:
                raise Pending((), "its turn after the earlier nonblocking operations")
            yield from pause(now + self.POLL)

    def release(self):
        """This call has issued its collective, or has none (once; later calls are no-ops)."""
        if not self.back:
            self.back = True
            self.turns.release(self.ticket)
