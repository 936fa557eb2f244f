"""Talking to a set of peers under a deadline: post, wait, name the silent ones.

Every wait of the library tests and yields (``wait``), never spins nor blocks in MPI,
so a deadline (an MPI_Wtime; 0 = none) can always be kept.  ``exchange`` is the one
way to send to and receive from every peer of a set; ``absent`` is the zero-byte
presence check built on it.
"""
from __future__ import annotations

import os

from mpi4py import MPI

from .lifetime import PROCESS


def wait(reqs, deadline=0.0, statuses=None) -> bool:
    """Test and yield until ``reqs`` complete (True) or MPI_Wtime passes ``deadline`` (False)."""
    while not MPI.Request.Testall(reqs, statuses):
        if deadline and MPI.Wtime() > deadline:
            return False
        os.sched_yield()
    return True


def unanswered(reqs):
    """Which of ``reqs`` are still pending, each tested once (Testall completes none of
    them unless it completes all)."""
    return [bool(r) and not r.Test() for r in reqs]


def cancel(reqs, *buffers):
    """Cancel what is still posted; free what will not die within half a second.
    ``buffers`` (the library's own, behind ``reqs``) are kept alive for good."""
    PROCESS.keep(*buffers)
    live = [r for r in reqs if r]
    for r in live:
        r.Cancel()
    until = MPI.Wtime() + 0.5
    for r in live:
        while r and not r.Test():
            if MPI.Wtime() > until:
                r.Free()
                break
            os.sched_yield()


class Exchange:
    """A message to and from every one of ``peers`` on ``comm`` with ``tag``: ``send``
    goes to each, ``recvs[i]`` is filled by ``peers[i]``; posted at once."""

    def __init__(self, comm, peers, tag, send, recvs):
        self.peers, self.send, self.recv_buffers = list(peers), send, recvs
        self.recvs = [comm.Irecv(buf, r, tag) for buf, r in zip(recvs, self.peers)]
        self.sends = [comm.Isend(send, r, tag) for r in self.peers]

    def silent(self, deadline):
        """The peers not heard from by ``deadline`` ([] once every one has, its sends
        complete too)."""
        if wait(self.recvs + self.sends, deadline):
            return []
        return [r for r, live in zip(self.peers, self.unanswered()) if live]

    def unanswered(self):
        """Per peer, whether its message has not come (each receive tested once)."""
        return unanswered(self.recvs)

    def cancel(self):
        cancel(self.recvs + self.sends, self.send, *self.recv_buffers)


def absent(comm, deadline, tag):
    """The members of ``comm`` that have not sent their zero-byte presence message (on
    ``comm``, ``tag``) by ``deadline``; [] once every one has."""
    rank, n = comm.Get_rank(), comm.Get_size()
    others = [r for r in range(n) if r != rank]
    exchange = Exchange(comm, others, tag, [bytearray(0), MPI.BYTE],
                        [[bytearray(0), MPI.BYTE] for _ in others])
    missing = exchange.silent(deadline)
    if missing:
        exchange.cancel()
    return missing
