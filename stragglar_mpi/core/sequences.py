"""Sequences: a communicator's calls that never overlap on a rank.

Calls run in *sequences*: the blocking calls (the ``State`` itself, core/state.py) and
up to ``LANES`` lanes of nonblocking ones (``Lane``).  The calls of one sequence never
overlap on a rank; those of different sequences may, so each sequence has its own
tags (core/tags.py), its own host scratch and its own decisions in call order (its
arrival table, the history, auto's sampling), which every rank reads alike.  MPI
collectives on the private duplicate are issued in call order across all sequences:
core/turns.py.
"""
from __future__ import annotations

from collections import deque

import numpy as np
from mpi4py import MPI

from . import config as _config
from . import tags
from .errors import Abandoned, abandoned_message
from .lifetime import PROCESS

LANES = tags.SEQUENCES - 1     # nonblocking operations that may run at once on a communicator
#: Seconds past the others' deadline (their entry + the timeout) before a rank coming to
#: a call takes it that they gave it up (the clocks' offsets are known to a few ms).
GIVEN_UP_MARGIN = 0.25


class Sequence:
    """Calls that never overlap on a rank, and what decides their roles, in call order."""

    def __init__(self, owner, index):
        self.owner, self.index = owner, index
        self.tag0 = tags.rounds(index)
        self.history = deque(maxlen=64)   # arrival records of earlier tracked calls
        self.auto_calls = 0               # "auto" calls above the small-size cut
        self.next_pair, self.pair_gap = 1, 1  # when "auto" records arrivals next (decide/roles.sampled)
        self.auto_memo = {}               # auto's recent model choices (decide/roles._auto)
        self.tuning = None                # auto's measured choices (decide/tuning.Tuner; blocking calls)
        self.tracked_seq = None           # arrival-table number of the last tracked call
        self.arrived = None               # the arrival record of the last tracked call (decide/roles.settle)
        self.log = None                   # what tracked calls ran, for the report (blocking calls)
        self.table = None                 # this sequence's arrival table, made at its first use (arrivals)
        self._entered = (None, {})        # (tracked call, {rank: entry}) for check_given_up
        self._scratch = np.empty(0, dtype=np.uint8)

    def abandon(self, why):
        """A call of this sequence died mid-way: the communicator is unusable and its
        library communicators are never freed (State.free)."""
        self.owner.broken = self.owner.broken or why
        self.owner._abandoned = True
        if self.owner.bindings is not None:
            self.owner.bindings.clear()   # a broken state is never reached from the compiled entry

    def tiers(self):
        """(topology, links) when the communicator spans nodes, else None (one tier)."""
        return None if self.links is None else (self.topology, self.links)

    def arrivals(self):
        """This sequence's arrival table (decide/arrival.py, decide/notices.py)."""
        if self.table is None and self.owner._arrivals is not None:
            self.table = self.owner._arrivals.table(self.index)
        return self.table

    def absent_ranks_steps(self):
        """Generator, once a wait of the current call (tracked) has timed out: the ranks
        missing from its arrival table (each waiting rank takes part in a short
        exchange).  When none is missing, this rank may be the late one that came after
        the others gave the call up: ``Abandoned`` is raised here (``check_given_up``)."""
        table = self.arrivals()
        if table is None or self.tracked_seq is None:
            return []
        try:
            missing = yield from table.absent(self.tracked_seq)
        except MPI.Exception:
            return []
        if not missing:      # every rank came: this one may be the late one
            self.check_given_up(before=False)
        return missing

    def note_entries(self):
        """Keep when each rank entered the current tracked call, as far as this rank has
        heard (rank 0's clock), for ``check_given_up``."""
        table = self.arrivals()
        try:
            entered = table.entered() if table is not None else {}
        except MPI.Exception:
            entered = {}
        self._entered = (self.tracked_seq, entered)

    def check_given_up(self, before):
        """Raise ``Abandoned`` if the other ranks have given up the current tracked call:
        a rank that entered it longer ago than the call's timeout (STRAGGLAR_TIMEOUT, the
        same on every rank) has timed out waiting for this one, since no rank completes a
        call without every rank.  Decided from the arrival notices this rank holds, with
        no message to the ranks that gave up (one to a dead rank crashed MPICH's UCX
        device).  ``before``: nothing of the call has run yet (a margin covers the
        clocks' offsets); after a failure, a rank near its deadline counts too.  The
        communicator is then unusable, as after any timeout."""
        timeout = _config.current().timeout
        table, (seq, entered) = self.arrivals(), self._entered
        if not timeout or table is None or seq is None or seq != self.tracked_seq:
            return
        margin = GIVEN_UP_MARGIN if before else -GIVEN_UP_MARGIN
        now = table.now()
        ranks = sorted(r for r, t in entered.items() if now - t > timeout + margin)
        if ranks:
            message = abandoned_message(ranks, before)
            self.abandon(message)
            PROCESS.keep(self.scratch(0))
            raise Abandoned(message, ranks, phase="the call's start" if before else None)

    def scratch(self, nbytes):
        """This sequence's host scratch (its calls never overlap)."""
        if self._scratch.nbytes < nbytes:
            self._scratch = np.empty(nbytes, dtype=np.uint8)
        return self._scratch


class Lane(Sequence):
    """A lane of a communicator's nonblocking operations (index 1..LANES): what the
    communicator's setup made is its state's (read through, since a lane may be made
    before a nonblocking call's setup has ended)."""

    @property
    def private(self):
        return self.owner.private

    @property
    def topology(self):
        return self.owner.topology

    @property
    def links(self):
        return self.owner.links

    @property
    def pools(self):
        return self.owner.pools

    @property
    def broken(self):
        """Why the communicator's library state is unusable (a timeout, a mismatch), or None."""
        return self.owner.broken

    @broken.setter
    def broken(self, why):
        self.owner.broken = why
