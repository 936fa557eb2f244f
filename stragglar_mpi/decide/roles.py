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
import threading

from ..core import config as _config
from ..core.errors import Pending
from ..schedule.algorithms import AUTO, NATIVE, ON_NODES, WITH_ROLES
from .algorithm import for_layout
from . import topology as _topology
from . import tuning as _tuning
from .tuning import picked
from .why import MODEL
from .arrival import GroupTable
from .clock import offsets
from .notices import NoticeTable
from .policy import (SAMPLE_FIRST, SAMPLE_MAX, SYNCHRONOUS, WINDOW, auto_algorithm, predict_straggler,
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
        self.lock = threading.Lock()    # the stall watchdog's thread uses ``comm`` under it

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
        with self.lock:
            self.comm.Free()


def decide(seq, args, deadline=0.0, t_call=None):
    """Generator: (algorithm, straggler, tracked, timing, how) of this call, the same on
    every rank: what runs on this layout (``for_layout``) and who plays the straggler;
    whether the call is tracked (it sent arrival notices: ``settle`` ends it); whether
    it is a timed run of auto's measurements and how auto chose (decide/tuning.py), as
    decide/why.py's parts (None when the algorithm was asked for by name).

    Calls that need arrival data ("auto" when sampled or timed, a policy by name, or a
    timeout that must name the missing ranks, but for a native one from C) send this
    rank's arrival notice first, stamped with ``t_call`` (the MPI_Wtime at the call's
    entry; None: now); the others touch nothing.  ``Pending`` when the arrival data do not
    come by ``deadline``."""
    name, policy, n = args.name, args.policy, args.n
    nbytes, roled = args.out.count * args.out.extent, name in WITH_ROLES
    # A blocking native call runs as the compiled entry runs its repeats, untracked even
    # under a deadline (the stall watchdogs name the missing ranks then: call/watchdog.py).
    watched = name == NATIVE and args.native_from_c and seq is seq.owner
    if not (name == AUTO or (roled and isinstance(policy, str)) or (deadline and n > 1 and not watched)):
        return _decided(seq, args, name, policy if roled else None, False)
    if name == AUTO:
        settings, tiers = _config.current(), seq.tiers()
        measured = getattr(seq, "tuning", None) is not None and settings.auto_measure  # tuning.measures
        pricing = (n, nbytes, tiers, measured, settings.model)
        if not deadline and not sampled(seq, pricing):
            name = _tuning.choose(seq, synchronous_algorithm(nbytes, tiers), nbytes, n, measured)
            if not _tuning.timing(seq):         # a timed run is tracked: the report has it
                return _decided(seq, args, name, None, False)
    arrivals = seq.table or seq.arrivals()
    if (yield from arrivals.arrive(deadline, t_call)) is None:
        raise Pending((), "the arrival notices of the previous call")
    seq.tracked_seq = arrivals.seq
    previous = arrivals.previous()
    if previous is not None:
        seq.history.append(previous)
    try:
        if name == AUTO:
            name = _tuning.choose(seq, _auto(seq, seq.history, pricing), nbytes, n, measured)
        straggler = None
        if name not in WITH_ROLES:
            pass
        elif policy == "predict":
            straggler = predict_straggler(seq.history, n)
        elif policy != "arrival":
            straggler = policy
        else:
            straggler = yield from arrivals.straggler(deadline)
            if straggler is None:
                raise Pending((), "the arrival of the early ranks")
        # Under a deadline the other ranks may have given up this call before this rank
        # came (they timed out waiting for it): then it runs nothing, so nothing that
        # the abandoned call left in flight is taken for its data.
        if deadline:
            seq.note_entries()
            seq.check_given_up(before=True)
    finally:
        arrivals.finish()
    return _decided(seq, args, name, straggler, True)


def _auto(seq, history, pricing):
    """The model's choice for ``history`` (policy.auto_algorithm, which reads its last
    WINDOW records), kept a few calls: a call asks what the one before decided
    (``sampled``), on the same records."""
    recent = list(history)[-WINDOW:]
    key = (tuple(map(id, recent)), pricing)
    memo = seq.auto_memo
    if key in memo:
        return memo[key][1]
    n, nbytes, tiers, measured, figures = pricing
    choice = auto_algorithm(recent, n, nbytes, tiers, measured, figures)
    if len(memo) >= 4:
        del memo[next(iter(memo))]      # the oldest: a call's own two stay for the next
    memo[key] = (recent, choice)        # the records stay alive: their ids stay theirs
    return choice


def _decided(seq, args, name, straggler, tracked):
    """The decision as ``decide`` gives it: ``name`` on this layout, and for "auto" its
    timed run and how it chose (read once per call)."""
    if name in ON_NODES:
        name = for_layout(name, seq.topology, straggler)
    if args.name != AUTO:
        return name, straggler, tracked, False, None
    timing, how = picked(seq)
    return name, straggler, tracked, timing, how or MODEL


def settle(seq, deadline=0.0):
    """Generator: after a tracked call's plan, its record (every rank's time, on every
    rank), kept as ``seq.arrived`` for the report (call/record.py); returns the arrival
    messages this rank sent for the call.  ``Pending`` past ``deadline``."""
    arrivals = seq.table
    if not (yield from arrivals.settle(deadline)):
        raise Pending((), "the arrival record of this call")
    seq.arrived = arrivals.previous()
    return arrivals.sent_in(arrivals.seq - 1)


def sampled(seq, pricing):
    """Whether an "auto" call reads and writes the arrival table.

    Calls are recorded in pairs (the second call of a pair reads the first one's
    record).  While the records say native, the pairs thin out: the gap between them
    starts at SAMPLE_FIRST calls and doubles up to SAMPLE_MAX.  Once the newest record
    shows a delay that would pay, every call is recorded until the history decides, and
    the gap starts over.  Every rank counts the same calls and reads the same records,
    so all agree.  ``pricing``: (n, bytes, tiers, measured, STRAGGLAR_MODEL) of the call.
    """
    seq.auto_calls += 1
    calls, history = seq.auto_calls, seq.history
    # The whole history first (the previous call's decision priced it: ``_auto`` keeps it),
    # so with a straggler that pays the newest record alone is not priced.
    if not history or (_auto(seq, history, pricing) not in SYNCHRONOUS
                       or _auto(seq, [history[-1]], pricing) not in SYNCHRONOUS):
        seq.next_pair, seq.pair_gap = calls + SAMPLE_FIRST, SAMPLE_FIRST
        return True
    if calls == seq.next_pair + 1:
        seq.next_pair += seq.pair_gap
        seq.pair_gap = min(2 * seq.pair_gap, SAMPLE_MAX)
        return True
    return calls == seq.next_pair
