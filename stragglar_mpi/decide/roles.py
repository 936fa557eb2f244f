"""Roles of one call: which algorithm runs and who plays the straggler, the same on every rank.

Calls that need arrival data ("auto", a policy by name, or a timeout that must name the
missing ranks) send arrival notices (decide/arrival.py from STRAGGLAR_ARRIVAL_GROUPS ranks,
decide/notices.py below); the others touch nothing.
``state`` is the communicator's (core/state.py): its arrival table, history, topology.
"""
from __future__ import annotations

from ..core import config as _config
from ..core.errors import Pending
from ..schedule.algorithms import has_roles
from . import topology as _topology
from . import tuning as _tuning
from .arrival import GroupTable
from .notices import NoticeTable
from .policy import (SAMPLE_FIRST, SAMPLE_MAX, SYNCHRONOUS, auto_algorithm, predict_straggler,
                     synchronous_algorithm)


def setup(state):
    """The collective part of a new state that this room keeps there (first call only):
    the arrival table, the nodes and, across several nodes, the link figures."""
    state.topology, node_comm = _topology.discover(state.private)
    node_comm.Free()              # both tiers run on the private duplicate: only the layout is kept
    state.keep_arrivals(arrival_table(state.private, state.topology.node_of))
    _tuning.setup(state)
    if state.topology.flat:
        return
    model = _config.current().model
    if len(model) == 5:
        state.links = _topology.Links(model[0], model[1], model[3], model[4])
    else:
        state.links = _topology.measure(state.private, state.topology)


def arrival_table(comm, node_of=None):
    """Groups and aggregators (O(log n) messages a rank and call) from
    STRAGGLAR_ARRIVAL_GROUPS ranks, a notice to every rank below: rank 0's setting, so
    that every rank builds the same kind."""
    least = comm.bcast(_config.current().arrival_groups, root=0)
    return GroupTable(comm, node_of) if comm.Get_size() >= least else NoticeTable(comm)


def roles(state, name, policy, nbytes, n, tracked=False, deadline=0.0):
    """(algorithm, straggler) for this call, the same on every rank; ``Pending`` when the
    arrival data do not come by ``deadline``."""
    needs_roles = name == "auto" or (has_roles(name) and isinstance(policy, str))
    if not (needs_roles or (tracked and n > 1)):
        return name, (policy if has_roles(name) else None)
    if name == "auto" and not tracked and not sampled(state, n, nbytes):
        return _tuning.choose(state, synchronous_algorithm(nbytes, state.tiers()), nbytes), None
    arrivals = state.arrivals()
    if arrivals.arrive(deadline) is None:
        raise Pending((), "the arrival notices of the previous call")
    state.tracked_seq = arrivals.seq
    previous = arrivals.previous()
    if previous is not None:
        state.history.append(previous)
        if state.log is not None:
            state.log.arrived(arrivals.seq - 1, previous)
    try:
        return _choose(state, arrivals, name, policy, nbytes, n, deadline)
    finally:
        arrivals.finish()


def settle(state, deadline=0.0):
    """After a tracked call's plan: its record (every rank's time, on every rank); returns
    the arrival messages this rank sent for the call.  ``Pending`` past ``deadline``."""
    arrivals = state.arrivals()
    if not arrivals.settle(deadline):
        raise Pending((), "the arrival record of this call")
    return arrivals.sent_in(arrivals.seq - 1)


def _choose(state, arrivals, name, policy, nbytes, n, deadline):
    if name == "auto":
        name = _tuning.choose(state, auto_algorithm(state.history, n, nbytes, state.tiers()), nbytes)
    if not has_roles(name):
        return name, None
    if policy == "predict":
        return name, predict_straggler(state.history, n)
    if policy != "arrival":
        return name, policy
    straggler = arrivals.straggler(deadline)
    if straggler is None:
        raise Pending((), "the arrival of the early ranks")
    return name, straggler


def sampled(state, n, nbytes):
    """Whether an "auto" call reads and writes the arrival table.

    Calls are recorded in pairs (the second call of a pair reads the first one's
    record).  While the records say native, the pairs thin out: the gap between them
    starts at SAMPLE_FIRST calls and doubles up to SAMPLE_MAX.  Once the newest record
    shows a delay that would pay, every call is recorded until the history decides, and
    the gap starts over.  Every rank counts the same calls and reads the same records,
    so all agree.
    """
    state.auto_calls += 1
    calls, history = state.auto_calls, state.history
    tiers = state.tiers()
    if not history or (auto_algorithm([history[-1]], n, nbytes, tiers) not in SYNCHRONOUS
                       or auto_algorithm(history, n, nbytes, tiers) not in SYNCHRONOUS):
        state.next_pair, state.pair_gap = calls + SAMPLE_FIRST, SAMPLE_FIRST
        return True
    if calls == state.next_pair + 1:
        state.next_pair += state.pair_gap
        state.pair_gap = min(2 * state.pair_gap, SAMPLE_MAX)
        return True
    return calls == state.next_pair
