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
from .steps import Wait

CLEANUP = 0.5     # seconds a cancelled request is given to die before it is freed


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


def _cancel(recvs, sends, buffers):
    # What has completed (an error completes a request too) is done; receives still
    # posted are cancelled, sends are not (MPI-4 deprecates it; MPICH's UCX device
    # crashed in MPI_Cancel of a send to a rank that never came): they complete, or are
    # freed, as a cancelled receive that will not die is.
    PROCESS.keep(*buffers)
    live_recvs, live_sends = _live(recvs), _live(sends)
    for r in live_recvs:
        r.Cancel()
    return live_recvs + live_sends


def _live(reqs):
    live = []
    for r in reqs:
        try:
            if r and not r.Test():
                live.append(r)
        except MPI.Exception:
            pass              # it completed with an error: it is gone
    return live


def _free_left(live):
    for r in live:
        try:
            if r and not r.Test():
                r.Free()      # will not die (a send to a rank that never came): MPI ends it
        except MPI.Exception:
            pass              # it completed with an error: it is gone


def cancelled(recvs, *buffers, sends=()):
    """Generator: ``cancel`` as a step (a ``Wait`` of up to CLEANUP seconds), so that on
    the progress thread one operation's cleanup stalls no other operation."""
    live = _cancel(recvs, sends, buffers)
    if live:
        yield Wait(live, MPI.Wtime() + CLEANUP)
    _free_left(live)


def cancel(recvs, *buffers, sends=()):
    """Cancel the receives still posted; free what (sends included) has not completed
    within CLEANUP seconds.  ``buffers`` (the library's own, behind the requests) are
    kept alive for good.  It waits here: for threads of their own (a setup's); the
    progress thread uses ``cancelled``."""
    live = _cancel(recvs, sends, buffers)
    until = MPI.Wtime() + CLEANUP
    while live and not all(_complete(r) for r in live) and MPI.Wtime() < until:
        os.sched_yield()
    _free_left(live)


def _complete(request):
    try:
        return request.Get_status()
    except MPI.Exception:
        return True


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
        cancel(self.recvs, self.send, *self.recv_buffers, sends=self.sends)

    def cancelled(self):
        """Generator: ``cancel`` as a step (on the progress thread; see ``cancelled``)."""
        return cancelled(self.recvs, self.send, *self.recv_buffers, sends=self.sends)


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
