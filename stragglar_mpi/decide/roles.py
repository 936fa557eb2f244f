"""Roles of one call: which algorithm runs and who plays the straggler, the same on every rank.

Calls that need arrival data ("auto", a policy by name, or a timeout that must name the
missing ranks) send arrival notices (decide/arrival.py from STRAGGLAR_ARRIVAL_GROUPS ranks,
decide/notices.py below); the others touch nothing.
``seq`` is the sequence of calls (core/sequences.py: a communicator's blocking calls, or one
lane of its nonblocking ones): its arrival table, history, the topology.  What waits
here is a generator (core/steps.py): its driver waits for the steps it yields.
"""
from __future__ import annotations

import os

from ..core import config as _config
from ..core.errors import Pending
from ..schedule.algorithms import AUTO, has_roles
from . import topology as _topology
from . import tuning as _tuning
from .arrival import GroupTable
from .clock import offsets
from .notices import NoticeTable
from .policy import (SAMPLE_FIRST, SAMPLE_MAX, SYNCHRONOUS, auto_algorithm, predict_straggler,
                     synchronous_algorithm)

_CLOCK_ROUNDS = 8


def setup(state):
    """The collective part of a new state that this room keeps there (first call only):
    the arrival tables, the nodes and, across several nodes, the link figures."""
    topology, node_comm = _topology.discover(state.private)
    node_comm.Free()              # both tiers run on the private duplicate: only the layout is kept
    state.keep_arrivals(Tables(state.private, topology.node_of))
    links = None
    if not topology.flat:
        model = _config.current().model
        if len(model) == 5:
            links = _topology.Links(model[0], model[1], model[3], model[4])
        else:
            links = _topology.measure(state.private, topology)
    state.set_layout(topology, links)
    _tuning.setup(state)


class Tables:
    """What the arrival tables of one communicator share, made at its setup: their
    duplicate (our messages never meet the plans'), this rank's clock offset, the token
    their messages carry, the nodes, and which protocol: groups and aggregators (O(log n)
    messages a rank and call) from STRAGGLAR_ARRIVAL_GROUPS ranks, a notice to every rank
    below, by rank 0's setting, so that every rank builds the same kind.  Each sequence
    of calls gets a table of its own (``table``)."""

    def __init__(self, comm, node_of=None):
        self.comm = comm.Dup()
        self.offset = offsets(self.comm, _CLOCK_ROUNDS)
        # Messages carry this token: one that a freed duplicate left in the MPI's queue
        # can be matched by a later duplicate that reuses the context id; it is dropped.
        self.token = float(self.comm.bcast(int.from_bytes(os.urandom(6), "little") + 1, root=0))
        least = self.comm.bcast(_config.current().arrival_groups, root=0)
        self.kind = GroupTable if self.comm.Get_size() >= least else NoticeTable
        self.node_of = node_of
        self._tables = []

    def table(self, sequence):
        made = self.kind(self, sequence)
        self._tables.append(made)
        return made

    def sent_total(self):
        """Arrival messages this rank sent on the communicator, every sequence together."""
        return sum(t.sent_total for t in self._tables)

    @property
    def protocol(self):
        return self.kind.protocol

    def free(self):
        for made in self._tables:
            made.free()
        self._tables = []
        self.comm.Free()


def roles(seq, name, policy, nbytes, n, tracked=False, deadline=0.0):
    """Generator: (algorithm, straggler) for this call, the same on every rank;
    ``Pending`` when the arrival data do not come by ``deadline``."""
    needs_roles = name == AUTO or (has_roles(name) and isinstance(policy, str))
    if not (needs_roles or (tracked and n > 1)):
        return name, (policy if has_roles(name) else None)
    if name == AUTO and not tracked and not sampled(seq, n, nbytes):
        return _tuning.choose(seq, synchronous_algorithm(nbytes, seq.tiers()), nbytes, n), None
    arrivals = seq.arrivals()
    if (yield from arrivals.arrive(deadline)) is None:
        raise Pending((), "the arrival notices of the previous call")
    seq.tracked_seq = arrivals.seq
    previous = arrivals.previous()
    if previous is not None:
        seq.history.append(previous)
        if seq.log is not None:
            seq.log.arrived(arrivals.seq - 1, previous)
    try:
        chosen = yield from _choose(seq, arrivals, name, policy, nbytes, n, deadline)
        # Under a deadline the other ranks may have given up this call before this rank
        # came (they timed out waiting for it): then it runs nothing, so nothing that
        # the abandoned call left in flight is taken for its data.
        if deadline:
            seq.note_entries()
            seq.check_given_up(before=True)
        return chosen
    finally:
        arrivals.finish()


def settle(seq, deadline=0.0):
    """Generator: after a tracked call's plan, its record (every rank's time, on every
    rank); returns the arrival messages this rank sent for the call.  ``Pending`` past
    ``deadline``."""
    arrivals = seq.arrivals()
    if not (yield from arrivals.settle(deadline)):
        raise Pending((), "the arrival record of this call")
    return arrivals.sent_in(arrivals.seq - 1)


def _choose(seq, arrivals, name, policy, nbytes, n, deadline):
    if name == AUTO:
        model = auto_algorithm(seq.history, n, nbytes, seq.tiers(), _tuning.measures(seq))
        name = _tuning.choose(seq, model, nbytes, n)
    if not has_roles(name):
        return name, None
    if policy == "predict":
        return name, predict_straggler(seq.history, n)
    if policy != "arrival":
        return name, policy
    straggler = yield from arrivals.straggler(deadline)
    if straggler is None:
        raise Pending((), "the arrival of the early ranks")
    return name, straggler


def sampled(seq, n, nbytes):
    """Whether an "auto" call reads and writes the arrival table.

    Calls are recorded in pairs (the second call of a pair reads the first one's
    record).  While the records say native, the pairs thin out: the gap between them
    starts at SAMPLE_FIRST calls and doubles up to SAMPLE_MAX.  Once the newest record
    shows a delay that would pay, every call is recorded until the history decides, and
    the gap starts over.  Every rank counts the same calls and reads the same records,
    so all agree.
    """
    seq.auto_calls += 1
    calls, history = seq.auto_calls, seq.history
    tiers, measured = seq.tiers(), _tuning.measures(seq)
    if not history or (auto_algorithm([history[-1]], n, nbytes, tiers, measured) not in SYNCHRONOUS
                       or auto_algorithm(history, n, nbytes, tiers, measured) not in SYNCHRONOUS):
        seq.next_pair, seq.pair_gap = calls + SAMPLE_FIRST, SAMPLE_FIRST
        return True
    if calls == seq.next_pair + 1:
        seq.next_pair += seq.pair_gap
        seq.pair_gap = min(2 * seq.pair_gap, SAMPLE_MAX)
        return True
    return calls == seq.next_pair
