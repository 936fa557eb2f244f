"""What the library keeps per communicator, attached to it as an MPI attribute.

Our messages travel on a private duplicate, so a user's point-to-point traffic on
the same communicator is never matched by ours.  Phase 1 and phase 2 are plans run on
that duplicate (run/phases.py), so the library makes no sub-communicator of the early
ranks, nor of a node; the communicators of one user communicator are the private
duplicate and the arrival table's duplicate (the node communicator that finds the
layout at setup is freed at once).

Every collective step here runs under the call's deadline (an MPI_Wtime, 0 = none):
the setup (first call) with a deadline first waits for a presence message from every
member (zero bytes, on the caller's communicator, ``tags.setup()``), which names the
ranks that did not come; then ``Idup`` waited with the deadline; once it completes
every member is in the setup, so the key broadcast and what the higher rooms make here
(``collective``: the arrival table, the topology) follow at once, in this thread.
"""
from __future__ import annotations

import os
from collections import Counter, deque

import numpy as np
from mpi4py import MPI

from . import tags
from .errors import Pending
from .exchange import absent, cancel, wait
from .lifetime import ARRIVALS, PROCESS

_SETUP = "the setup of this communicator (its first call)"


class State:
    """One communicator's library state.  ``bindings``: the compiled entry's cache of
    earlier calls' checks (call/_entry.pyx), or None without the build."""

    def __init__(self, bindings=None):
        self.private, self.owns_private = None, True
        self.key = None
        self.calls = Counter()
        self.last = None                  # the last call: a call.record.CallRecord
        self.history = deque(maxlen=64)   # arrival records of earlier tracked calls
        self.auto_calls = 0               # "auto" calls above the small-size cut
        self.next_pair, self.pair_gap = 1, 1  # when "auto" records arrivals next (_allreduce._sampled)
        self.tuning = None                # auto's measured synchronous choices (decide/tuning.Tuner)
        self.tracked_seq = None           # arrival-table number of the last tracked call
        self.broken = None                # why this state is unusable (after a timeout)
        self.bindings = bindings
        self.log = None                   # what tracked calls ran, for the report (call/report.Log)
        self._arrivals = None             # the arrival table (decide/arrival.GroupTable or decide/notices.NoticeTable), set at setup
        self.topology, self.links = None, None
        self._scratch = np.empty(0, dtype=np.uint8)
        self.pools = {}                   # memory backends' scratch, per operation (_memory.Pool)

    def setup(self, comm, deadline=0.0, collective=None, private=False):
        """The collective part, in the first call on ``comm`` (see the module's docstring);
        ``collective(state)`` then makes what the higher rooms keep here (the arrival
        table, the topology: decide/roles.setup).  ``private``: ``comm`` is already the
        library's own (a nonblocking lane's duplicate, every member in it): it serves as
        the private duplicate, and its owner frees it."""
        if private:
            if deadline and comm.Get_size() > 1:
                _presence(comm, deadline)     # the key broadcast below blocks: all must be here
            self.private, self.owns_private = comm, False
        else:
            self.private = self._duplicate(comm, deadline)
        # Every member has joined the Idup: what follows cannot wait for long.  The same
        # key on every member: arrival tables are freed at exit in key order, so ranks
        # that share several communicators never wait on each other crosswise.
        self.key = self.private.bcast((MPI.Wtime(), os.getpid(), id(self)), root=0)
        if collective is not None and self.private.Get_size() > 1:
            collective(self)

    @staticmethod
    def _duplicate(comm, deadline):
        if deadline and comm.Get_size() > 1:
            _presence(comm, deadline)
        private, request = MPI.Intracomm.Idup(comm)
        if not wait([request], deadline):
            cancel([], private, request)   # MPI completes the Idup into them later: keep them
            others = [r for r in range(comm.Get_size()) if r != comm.Get_rank()]
            raise Pending(others, _SETUP + ": the other ranks did not join its duplicate "
                          "(they may have given up waiting for this rank)")
        return MPI.Intracomm(private)

    def tiers(self):
        """(topology, links) when the communicator spans nodes, else None (one tier)."""
        return None if self.links is None else (self.topology, self.links)

    def arrivals(self):
        """The shared arrival table (made collectively with the state, in the first call)."""
        return self._arrivals

    def keep_arrivals(self, table):
        """Keep the arrival table made at setup; it is freed with the state or at exit."""
        self._arrivals = table
        PROCESS.register("arrivals", self)

    def absent_ranks(self):
        """Ranks missing from the arrival table of the current call, when it is tracked."""
        if self._arrivals is None or self.tracked_seq is None:
            return []
        try:
            return self._arrivals.absent(self.tracked_seq)
        except MPI.Exception:
            return []

    def free_arrivals(self):
        if self._arrivals is not None and not MPI.Is_finalized():
            self._arrivals.free()
        self._arrivals = None

    def scratch(self, nbytes):
        if self._scratch.nbytes < nbytes:
            self._scratch = np.empty(nbytes, dtype=np.uint8)
        return self._scratch

    def free(self):
        if MPI.Is_finalized():
            return
        self.free_arrivals()
        if self.private is not None and self.owns_private:
            self.private.Free()


def _presence(comm, deadline):
    """Wait until every member of ``comm`` has entered the setup; Pending names those
    that have not by ``deadline``."""
    missing = absent(comm, deadline, tags.setup())
    if missing:
        raise Pending(missing, _SETUP, missing=missing)


def _free_arrival_tables():
    # Before MPI_Finalize (core/lifetime.py says when): in key order on every rank.
    for state in sorted(PROCESS.live("arrivals"), key=lambda st: st.key):
        state.free_arrivals()


PROCESS.on_exit(ARRIVALS, _free_arrival_tables)


def _delete(comm, keyval, state):
    state.free()


KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete)


#: Marks a communicator the library made for itself (``mark_own``): its state needs no
#: private duplicate of it.
OWN = MPI.Comm.Create_keyval()


def mark_own(comm):
    """``comm`` is the library's own, known to every member (a lane's completed Idup)."""
    comm.Set_attr(OWN, True)


def setup_state(comm, deadline=0.0, bindings=None, collective=None) -> State:
    """The state of ``comm``, set up collectively in its first call (under ``deadline``);
    ``bindings`` and ``collective`` are what the call room gives a new one (State.setup).

    A setup that fails leaves a state behind that says why (``broken``), so that a
    later call raises instead of starting a second, mismatched setup."""
    state = comm.Get_attr(KEYVAL)
    if state is None:
        state = State(bindings() if bindings else None)
        comm.Set_attr(KEYVAL, state)
        try:
            state.setup(comm, deadline, collective, private=bool(comm.Get_attr(OWN)))
        except BaseException as exc:
            state.broken = state.broken or f"its setup failed ({type(exc).__name__}: {exc})"
            raise
    elif state.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {state.broken}")
    return state


def peek(comm):
    """The state if the communicator has one, without creating it."""
    return comm.Get_attr(KEYVAL)
