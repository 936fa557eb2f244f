"""Decisions on synthetic arrival records (no MPI processes, no sleeps): roles, auto, timeouts."""
from types import SimpleNamespace

import pytest
from mpi4py import MPI

from stragglar_mpi.call import allreduce as _allreduce
from stragglar_mpi.core import config as _config
from stragglar_mpi.core.errors import Pending, StragglerTimeout
from stragglar_mpi.core.steps import Wait
from stragglar_mpi.run._interpreter import drive
from stragglar_mpi.decide import roles as _roles
from stragglar_mpi.decide.arrival import Arrival
from stragglar_mpi.decide.policy import auto_algorithm, expected_gap, predict_straggler

MiB = 1 << 20


def immediately(value=None):
    """A step path that waits for nothing: ``value``."""
    return value
    yield  # makes this a generator


def late(rank, gap, n=4):
    """A record where ``rank`` came ``gap`` seconds after the others (who came at once)."""
    order = tuple(r for r in range(n) if r != rank) + (rank,)
    return Arrival(order, (0.0,) * (n - 1) + (gap,))


class Table:
    """An arrival table whose previous call's record is ``previous`` and whose coordinator
    names ``last`` (None: the deadline passes); ``arrive`` returns None when ``stale``."""

    def __init__(self, previous=None, last=None, stale=False):
        self.seq, self._previous, self._last, self.stale, self.finished = 5, previous, last, stale, 0

    def arrive(self, deadline, entry=None):
        return immediately(None if self.stale else 1)

    def previous(self):
        return self._previous

    def straggler(self, deadline):
        return immediately(self._last)

    def finish(self):
        self.finished += 1


def state_with(table):
    state = SimpleNamespace(arrivals=lambda: table, table=None, tracked_seq=None, history=[], log=None, auto_memo={},
                            broken=None, bindings=None, tiers=lambda: None,
                            absent_ranks_steps=lambda: immediately([2]),
                            scratch=lambda nbytes: bytearray(nbytes))
    state.owner = state
    return state


def roles(state, name, policy, nbytes, n, deadline=0.0):
    """(algorithm, straggler) that ``decide`` gives a call of these arguments."""
    args = SimpleNamespace(name=name, policy=policy, n=n, out=SimpleNamespace(count=nbytes, extent=1))
    return drive(_roles.decide(state, args, deadline))[:2]


def test_predict_takes_the_rank_that_came_last_most_often():
    history = [late(1, 0.01), late(3, 0.01), late(3, 0.02), late(2, 0.01)]
    assert predict_straggler(history, 4) == 3
    assert predict_straggler([], 4) == 3            # no history: the last rank


def test_auto_takes_stragglar_only_when_the_delay_pays():
    assert auto_algorithm([late(3, 0.5)] * 4, 8, 64 * MiB) == "stragglar"
    assert auto_algorithm([late(3, 0.0)] * 4, 8, 64 * MiB) == "native"
    assert auto_algorithm([], 8, 64 * MiB) == "native"
    assert expected_gap([late(3, 0.1), late(3, 0.3), late(3, 0.2)]) == pytest.approx(0.2)


def test_arrival_roles_come_from_the_coordinator_and_the_history_grows():
    table = Table(previous=late(3, 0.2), last=3)
    state = state_with(table)
    assert roles(state, "stragglar", "arrival", MiB, 4) == ("stragglar", 3)
    assert state.history == [late(3, 0.2)] and state.tracked_seq == 5 and table.finished == 1
    assert roles(state, "stragglar", "predict", MiB, 4) == ("stragglar", 3)


def test_a_rank_given_by_number_needs_no_arrival_data():
    def untouched():
        raise AssertionError("an untracked call with a given straggler read the arrival table")
    state = state_with(None)
    state.arrivals = untouched
    assert roles(state, "stragglar", 2, MiB, 4) == ("stragglar", 2)
    assert roles(state, "ring", 2, MiB, 4) == ("ring", None)


def test_late_notices_of_the_previous_call_raise_a_timeout_on_this_rank():
    """The previous call's notices did not come by the deadline: StragglerTimeout naming
    the phase (it used to be a TypeError: a wrong call of the timeout's constructor)."""
    state = state_with(Table(stale=True))
    with pytest.raises(Pending) as caught:
        roles(state, "stragglar", "arrival", MiB, 4, deadline=1.0)
    error = drive(_allreduce.failed(state, caught.value, 2.0))
    assert isinstance(error, StragglerTimeout)
    assert "the arrival notices of the previous call" in str(error) and error.missing == (2,)
    assert state.broken == str(error)


def test_the_coordinator_not_answering_is_a_timeout_too():
    state = state_with(Table(previous=late(3, 0.2), last=None))
    with pytest.raises(Pending) as caught:
        roles(state, "stragglar", "arrival", MiB, 4, deadline=1.0)
    assert caught.value.phase == "the arrival of the early ranks"


def _two_nodes(links):
    from stragglar_mpi.decide.topology import Links, Topology
    nodes = ((0, 1, 2, 3), (4, 5, 6, 7))
    return Topology(nodes, (0,) * 4 + (1,) * 4), Links(*links)


def test_auto_across_nodes_takes_hring_when_nobody_is_late(monkeypatch):
    from stragglar_mpi.decide.policy import synchronous_algorithm
    from stragglar_mpi.schedule.tiers import costs
    monkeypatch.delenv("STRAGGLAR_MODEL", raising=False)
    links = (1e-6, 20e9, 5e-5, 1e9)           # fast inside the nodes, slow between them
    tiers = _two_nodes(links)
    model = costs(2, 4, 64 * MiB, *links)
    assert model["hring"].post_arrival < model["native"].post_arrival   # the model says so
    prompt = [Arrival(tuple(range(8)), (0.0,) * 8)] * 4
    assert auto_algorithm(prompt, 8, 64 * MiB, tiers) == "hring"
    assert auto_algorithm([], 8, 64 * MiB, tiers) == "hring"          # no history yet
    assert synchronous_algorithm(64 * MiB, tiers) == "hring"
    assert synchronous_algorithm(64 * MiB, None) == "native"          # one tier: the MPI's own
    # a long delay on a rank with a neighbour: a straggler-aware one
    late_ = [Arrival(tuple(range(8)), (0.0,) * 7 + (1.0,))] * 4
    assert auto_algorithm(late_, 8, 64 * MiB, tiers) in ("hierarchical", "stragglar")


def test_auto_across_nodes_keeps_native_when_the_tiers_are_even(monkeypatch):
    monkeypatch.delenv("STRAGGLAR_MODEL", raising=False)
    tiers = _two_nodes((1e-5, 3e9, 1e-5, 3e9))
    prompt = [Arrival(tuple(range(8)), (0.0,) * 8)] * 4
    assert auto_algorithm(prompt, 8, 64 * MiB, tiers) == "native"


def test_unsampled_auto_calls_across_nodes_run_the_synchronous_choice(monkeypatch):
    monkeypatch.delenv("STRAGGLAR_MODEL", raising=False)
    tiers = _two_nodes((1e-6, 20e9, 5e-5, 1e9))
    prompt = Arrival(tuple(range(8)), (0.0,) * 8)
    state = SimpleNamespace(auto_calls=0, history=[prompt] * 4, next_pair=100, pair_gap=4,
                            tiers=lambda: tiers, topology=tiers[0], auto_memo={})
    # hring is synchronous: the pairs thin out as they do for native...
    pricing = (8, 64 * MiB, tiers, False, _config.read({}).model)
    assert not _roles.sampled(state, pricing)
    # ...and a call that is not sampled runs the synchronous choice, not native
    state.arrivals = lambda: pytest.fail("an unsampled call reads no arrival table")
    assert roles(state, "auto", "arrival", 64 * MiB, 8) == ("hring", None)


def test_arrival_structures_cover_every_rank_and_leave_the_straggler_out():
    """Groups of about sqrt(n) (none of one rank), two aggregators each that came first
    last time, and the roles' tree: every rank but the straggler, at most 2 children."""
    from stragglar_mpi.decide.arrival import aggregators_of, groups_of, tree_children
    for n in (2, 3, 4, 5, 8, 16, 17, 32, 33, 100):
        groups = groups_of(n, [r % 4 for r in range(n)])
        assert sorted(r for g in groups for r in g) == list(range(n))
        assert min(map(len, groups)) >= 2 and max(map(len, groups)) <= 2 * (int(n ** 0.5) + 1)
        previous = Arrival(tuple(reversed(range(n))), tuple(range(n)))
        assert all(pair == tuple(sorted(g, reverse=True)[:2])
                   for g, pair in zip(groups, aggregators_of(groups, previous)))
        for root, late in ((0, n - 1), (n - 1, 0), (n // 2, n // 2), (1 % n, 0)):
            reached, todo = [root], [root]
            while todo:
                children = tree_children(todo.pop(), root, late, n)
                assert len(children) <= 2 and (late not in children)
                reached += children
                todo += children
            assert sorted(reached) == sorted(set(range(n)) - ({late} - {root}))


def test_a_late_coordinator_asks_before_it_trusts_an_old_report():
    """The coordinator comes last and finds a report "all but 5" from before 5 came: it
    asks 5's other aggregator, hears that 5 is in, and names itself (the latest)."""
    from stragglar_mpi.decide import arrival as _arrival
    table = _arrival.GroupTable.__new__(_arrival.GroupTable)
    table.n, table.rank, table.seq, table.token = 6, 0, 0, 1.0
    table.groups = _arrival.groups_of(6)                   # (0, 1, 2), (3, 4, 5)
    table.group_of = {r: i for i, g in enumerate(table.groups) for r in g}
    call = _arrival._Call(0)
    call.arrived, call.mine, call.coordinator = True, 9.0, 0
    call.aggregators = ((0, 1), (3, 4))
    call.heard = {1: 1.0, 2: 2.0}
    call.reports = {3: (5, 4, 4.0), 4: (5, 4, 4.0)}       # both: "all but 5", before 5 came
    table._calls = {0: call}
    sent = []
    table._send = lambda c, payload, tag, dest: sent.append((tag, dest, list(payload)))
    answers = iter([[], [(3, 5)]])

    def pump(thorough=False):
        for src, x in next(answers, []):
            call.answers[(src, x)] = (True, 8.0)           # 3 has heard from 5 (at 8.0)
    table._pump = pump
    table.comm, table.tag = MPI.COMM_SELF, 0
    table._next = lambda until: Wait((), 0.0)               # a wait for a message: over at once
    assert drive(table.straggler()) == 0
    assert (_arrival.tags.QUERY, 3, [5]) in sent and (_arrival.tags.QUERY, 4, [5]) in sent
    assert (_arrival.tags.DECISION, 1, [0]) in sent         # down the tree: 0 feeds 1 and 2


def test_one_function_prices_a_communicator():
    """decide/topology.costs: the two-tier model with the nodes' sizes and the links (the
    smallest node's ranks as hring's lanes), or one tier of n ranks."""
    from stragglar_mpi.decide.topology import Links, Topology, costs, shape
    from stragglar_mpi.schedule import tiers
    nodes = ((0, 1, 2), (3, 4))
    tiers_ = (Topology(nodes, (0, 0, 0, 1, 1)), Links(1e-6, 20e9, 5e-5, 1e9))
    assert shape(tiers_) == (2, 3, 2, (1e-6, 20e9, 5e-5, 1e9))
    assert costs(MiB, tiers_, 5, None, None) == tiers.costs(2, 3, MiB, 1e-6, 20e9, 5e-5, 1e9, 2)
    assert costs(MiB, None, 5, 1e-5, 1e9) == tiers.flat(5, MiB, 1e-5, 1e9)
