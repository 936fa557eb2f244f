"""Hierarchical StragglAR (both phases) and the hierarchical ring as schedules: verified
on every layout, their structure, and the two-tier model against the simulator
(pure Python, no MPI)."""
import importlib

import pytest

from stragglar_mpi.schedule import Schedule, ScheduleError, Transfer, build, simulate, verify
from stragglar_mpi.schedule.hierarchical import (
    hierarchical, hring, owners_of, phase1, pieces_for, rank_rounds, rounds_of, spread)
from stragglar_mpi.schedule.tiers import pieces as model_pieces
from stragglar_mpi.schedule.simulate import Tiers
from stragglar_mpi.schedule.tiers import Cost, costs, floor, hierarchical_cost

GiB = 2**30
LINKS = (3e-6, 450e9, 5e-6, 50e9)     # NVLink-class inside, one 400 Gb/s NIC per GPU between


def block(m, k):
    return tuple(tuple(range(i * k, (i + 1) * k)) for i in range(m))


def cyclic(m, k):
    return tuple(tuple(range(i, m * k, m)) for i in range(m))


LAYOUTS = [block(2, 2), block(2, 4), block(4, 2), cyclic(2, 4), cyclic(4, 2), block(3, 4),
           ((0, 3, 6), (1, 4, 7), (2, 5)), ((0, 1, 2), (3, 4, 5), (6, 7)),
           ((0,), (1, 2, 3), (4, 5)), block(5, 3)]


def node_of(nodes):
    return {r: i for i, node in enumerate(nodes) for r in node}


def stragglers(nodes):
    """Every rank that has a neighbour on its node."""
    where = node_of(nodes)
    return [r for r in sorted(where) if len(nodes[where[r]]) > 1]


def late(n):
    return [0.0] * (n - 1) + [10.0]


def tiers_of(m, k):
    return Tiers(tuple(r // k for r in range(m * k)), LINKS[2], LINKS[3])


@pytest.mark.parametrize("nodes", LAYOUTS)
@pytest.mark.parametrize("pieces", [1, 3])
def test_both_phases_verify_for_every_straggler_of_every_layout(nodes, pieces):
    n = sum(map(len, nodes))
    for straggler in range(n):
        if straggler not in stragglers(nodes):
            with pytest.raises(ScheduleError, match="second rank"):
                hierarchical(nodes, straggler, pieces)
            continue
        after = verify(hierarchical(nodes, straggler, pieces))
        before = verify(phase1(nodes, straggler, pieces))
        assert len(after.rounds) == rounds_of(len(nodes), pieces)
        assert after.owners == before.owners == owners_of(nodes, straggler, pieces)
        k = len(next(nd for nd in nodes if straggler in nd))
        assert before.chunks == after.chunks == (k - 1) * pieces * k   # k sub-chunks a piece


@pytest.mark.parametrize("straggler", [127, 0, 61])
def test_sixteen_nodes_of_eight(straggler):
    nodes = block(16, 8)
    verify(hierarchical(nodes, straggler, 4))
    verify(phase1(nodes, straggler, 4))
    verify(hring(nodes))


@pytest.mark.parametrize("nodes", LAYOUTS[:9])
def test_after_arrival_only_s_reduces_and_each_node_takes_the_buffer_in_once(nodes):
    where = node_of(nodes)
    for straggler in stragglers(nodes):
        schedule = hierarchical(nodes, straggler, 2)
        home = where[straggler]
        transfers = [t for rnd in schedule.rounds for t in rnd]
        # the only reductions: S's raw chunks folded in by their owners
        assert {(t.src, t.dst, t.chunk) for t in transfers if t.reduce} == {
            (straggler, owner, c) for c, owner in enumerate(schedule.owners)}
        crossing = [t for t in transfers if where[t.src] != where[t.dst]]
        assert all(where[t.dst] != home for t in crossing)   # nothing crosses back to S's node
        for i in range(len(nodes)):
            got = sorted(t.chunk for t in crossing if where[t.dst] == i)
            assert got == ([] if i == home else list(range(schedule.chunks)))
        assert set(schedule.owners) == set(nodes[home]) - {straggler}
        # each owner's chunks are contiguous, in local order (the runtime's phase 1 needs it)
        assert list(schedule.owners) == sorted(schedule.owners, key=nodes[home].index)


@pytest.mark.parametrize("nodes", LAYOUTS[:9])
def test_phase1_leaves_the_straggler_alone_and_is_the_same_on_every_build(nodes):
    for straggler in stragglers(nodes):
        schedule = phase1(nodes, straggler, 2)
        transfers = [t for rnd in schedule.rounds for t in rnd]
        assert all(straggler not in (t.src, t.dst) and t.reduce for t in transfers)
        assert Schedule.from_json(schedule.to_json()) == schedule
        importlib.import_module("stragglar_mpi.schedule.hierarchical")._phase1.cache_clear()
        assert phase1(nodes, straggler, 2) == schedule   # the reduction order is fixed


def test_rank_rounds_are_the_ranks_slices_of_the_whole_schedules():
    nodes = ((0, 3, 6), (1, 4, 7), (2, 5))
    for straggler in (4, 2):
        for phase, whole in ((1, phase1(nodes, straggler, 3)), (2, hierarchical(nodes, straggler, 3))):
            for rank in range(8):
                chunks, rounds = rank_rounds(nodes, straggler, rank, 3, phase)
                mine = [sorted(t for t in rnd if rank in (t.src, t.dst)) for rnd in whole.rounds]
                assert chunks == whole.chunks
                assert [sorted(rnd) for rnd in rounds] == mine   # round numbers kept: they are tags


def test_spread_sends_one_piece_a_round_and_reaches_every_node_once():
    for m in (2, 3, 5, 8, 12, 17, 64, 100):
        for pieces in (1, 4, 16):
            moves = spread(m, pieces)
            rounds = moves[-1][0] + 1
            d = (m - 1).bit_length()
            assert rounds >= pieces + d - 1
            assert rounds <= pieces + d - 1 + (0 if m & (m - 1) == 0 else 4)
            got = sorted((v, w) for _, _, v, w in moves)
            assert got == [(v, w) for v in range(1, m) for w in range(pieces)]
            for t in range(rounds):
                now = [mv for mv in moves if mv[0] == t]
                assert len({u for _, u, _, _ in now}) == len(now) == len({v for _, _, v, _ in now})
                assert all(w <= t for _, u, _, w in now if u == 0)


def _drop(schedule, r, i=0):
    rounds = list(schedule.rounds)
    rounds[r] = rounds[r][:i] + rounds[r][i + 1:]
    return Schedule(schedule.algorithm, schedule.n, schedule.straggler, schedule.chunks,
                    rounds, schedule.owners)


def _add(schedule, r, transfer):
    rounds = list(schedule.rounds)
    rounds[r] = rounds[r] + (transfer,)
    return Schedule(schedule.algorithm, schedule.n, schedule.straggler, schedule.chunks,
                    rounds, schedule.owners)


def test_planted_errors_are_caught():
    nodes = block(2, 4)
    after = hierarchical(nodes, 7, 2)
    with pytest.raises(ScheduleError):
        verify(_drop(after, 0))                       # an owner never gets S's chunk
    wrong_owner = Schedule(after.algorithm, after.n, after.straggler, after.chunks,
                           after.rounds, (7,) + after.owners[1:])
    with pytest.raises(ScheduleError, match="owner"):
        verify(wrong_owner)
    early_copy = _add(after, 0, Transfer(4, 0, 0))    # copies chunk 0 before it is finished
    with pytest.raises(ScheduleError, match="fully reduced"):
        verify(early_copy)
    before = phase1(nodes, 7, 2)
    with pytest.raises(ScheduleError, match="owner"):
        verify(_drop(before, len(before.rounds) - 1))  # a node's partial never arrives
    with pytest.raises(ScheduleError, match="straggler 7 takes part"):
        verify(_add(before, 0, Transfer(7, 5, 0, True)))
    twice = _add(before, len(before.rounds) - 1, Transfer(1, 4, 0, True))
    with pytest.raises(ScheduleError, match="twice"):
        verify(twice)
    ring = hring(nodes)
    with pytest.raises(ScheduleError):
        verify(_drop(ring, 1))


@pytest.mark.parametrize("nodes", LAYOUTS)
def test_hring_verifies_on_every_layout(nodes):
    schedule = verify(hring(nodes))
    sizes = [len(node) for node in nodes]
    assert schedule.chunks == min(sizes) * len(nodes)
    assert len(schedule.rounds) == 2 * (max(sizes) - 1) + 2 * (len(nodes) - 1)


def test_hring_refuses_what_is_not_a_partition():
    with pytest.raises(ScheduleError, match="partition"):
        hring(((0, 1), (1, 2)))


@pytest.mark.parametrize("m,k", [(2, 2), (2, 8), (4, 8), (3, 4), (16, 4)])
@pytest.mark.parametrize("size", [2**24, GiB])
def test_closed_forms_match_the_simulated_schedules(m, k, size):
    a1, b1, a2, b2 = LINKS
    n = m * k
    model = costs(m, k, size, *LINKS)
    ring = simulate(hring(block(m, k)), size, a1, b1, None, tiers_of(m, k))
    assert ring.finish == pytest.approx(model["hring"].post_arrival, rel=1e-9)
    pieces = model_pieces(m, k, size, *LINKS)
    sim = simulate(hierarchical(block(m, k), n - 1, pieces), size, a1, b1, late(n), tiers_of(m, k))
    first, after = hierarchical_cost(m, k, size, *LINKS, pieces)
    assert model["hierarchical"] == Cost(first, after)
    assert sim.post_arrival == pytest.approx(after, rel=0.12)
    assert sim.phase1_end == pytest.approx(first, rel=0.15)
    flat = simulate(build("stragglar", n), size, a1, b1, late(n), tiers_of(m, k)).post_arrival
    assert flat <= model["stragglar"].post_arrival * 1.0001    # the model prices every round inter


@pytest.mark.parametrize("m", [2, 4, 16, 128])
def test_model_targets_of_issue_24(m):
    """1 GiB, nodes of 8, the last rank late, block layout: after the arrival at most 0.6x
    the hierarchical ring and 2x the floor; phase 1 at most 0.75x the hierarchical ring."""
    k, (a1, b1, a2, b2) = 8, LINKS
    n = m * k
    pieces = model_pieces(m, k, GiB, *LINKS)
    sim = simulate(hierarchical(block(m, k), n - 1, pieces), GiB, a1, b1, late(n), tiers_of(m, k))
    ring = costs(m, k, GiB, *LINKS)["hring"].post_arrival
    assert sim.post_arrival <= 0.6 * ring
    assert sim.post_arrival <= 2 * floor(m, k, GiB, b1, b2)
    assert sim.phase1_end <= 0.75 * ring


def test_pieces_follow_the_model_and_small_buffers_stay_whole():
    assert model_pieces(2, 8, 1 << 20, *LINKS) == 1
    assert model_pieces(16, 8, GiB, *LINKS) > 16
    assert pieces_for(2) == 1 and pieces_for(16) == 4        # the size-free default


def test_two_tiers_price_messages_by_the_nodes_they_join():
    a1, b1, a2, b2 = LINKS
    schedule = build("ring", 4)
    one = simulate(schedule, GiB, a1, b1)
    same = simulate(schedule, GiB, a1, b1, tiers=Tiers((0, 0, 0, 0), a2, b2))
    split = simulate(schedule, GiB, a1, b1, tiers=Tiers((0, 0, 1, 1), a2, b2))
    assert same.finish == pytest.approx(one.finish)
    assert split.finish > 5 * one.finish
    with pytest.raises(ValueError, match="node of each"):
        simulate(schedule, GiB, a1, b1, tiers=Tiers((0, 1), a2, b2))


def test_hierarchical_beats_flat_stragglar_for_two_nodes_with_fast_links_inside():
    model = costs(2, 8, GiB, *LINKS)
    assert model["hierarchical"].post_arrival < 0.5 * model["stragglar"].post_arrival
    assert model["hierarchical"].after(0.0) > model["hierarchical"].post_arrival


def test_show_command_prints_both_phases_and_hring(capsys):
    import json
    from stragglar_mpi.schedule.__main__ import main
    assert main(["show", "--algorithm", "hierarchical", "--n", "8", "--node-size", "4",
                 "--json", "--pieces", "2"]) == 0
    shown = Schedule.from_json(capsys.readouterr().out)
    assert shown == hierarchical(block(2, 4), 7, 2)
    assert main(["show", "--algorithm", "hierarchical", "--n", "8", "--node-size", "4",
                 "--phase", "1", "--layout", "cyclic", "--straggler", "2", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["algorithm"] == "reduce_to_owners" and first["straggler"] == 2
    assert {"src", "dst", "chunk", "reduce"} <= set(first["rounds"][0][0])
    assert main(["show", "--algorithm", "hring", "--n", "8", "--node-size", "2"]) == 0
    assert capsys.readouterr().out.startswith("hring n=8")
    with pytest.raises(SystemExit):
        main(["show", "--algorithm", "hring", "--n", "8", "--node-size", "3"])


def test_simulate_command_with_two_tiers(capsys):
    from stragglar_mpi.schedule.__main__ import main
    assert main(["simulate", "--node-size", "4", "--n", "8,16", "--size", "64MiB",
                 "--alpha-inter", "20us", "--bandwidth-inter", "1GB/s"]) == 0
    out = capsys.readouterr().out
    for word in ("hierarchical", "hring", "floor", "hier/hring", "p1/hring", "no straggler"):
        assert word in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("2 ", "4 "))]
    assert len(rows) == 4 and all(float(r[3]) > 0 for r in rows)
    with pytest.raises(SystemExit):
        main(["simulate", "--node-size", "3", "--n", "8"])


def test_auto_across_nodes_follows_the_two_tier_model(monkeypatch):
    from stragglar_mpi.decide.arrival import Arrival
    from stragglar_mpi.decide.policy import auto_algorithm
    from stragglar_mpi.decide.topology import Links, Topology
    monkeypatch.delenv("STRAGGLAR_MODEL", raising=False)
    nodes = cyclic(2, 4)
    topo = Topology(nodes, tuple(node_of(nodes)[r] for r in range(8)))
    links = Links(1e-5, 3e9, 3e-5, 8e8)
    late_ = [Arrival(tuple(range(8)), (0.0,) * 7 + (0.2,))] * 4
    prompt = [Arrival(tuple(range(8)), (0.0,) * 8)] * 4
    assert auto_algorithm(late_, 8, 16 << 20, (topo, links)) == "hierarchical"
    # nobody late: the hierarchical ring, the fastest synchronous one over the slow links...
    assert auto_algorithm(prompt, 8, 16 << 20, (topo, links)) == "hring"
    # ...but not when both tiers are equally fast
    even = Links(1e-5, 3e9, 1e-5, 3e9)
    assert auto_algorithm(prompt, 8, 16 << 20, (topo, even)) == "native"
    alone = Topology(((0, 1, 2, 3, 4, 5, 6), (7,)), (0,) * 7 + (1,))
    assert auto_algorithm(late_, 8, 16 << 20, (alone, links)) == "stragglar"   # S alone on its node


def test_a_measured_auto_tries_a_straggler_aware_choice_within_the_margin(monkeypatch):
    """Where the model prices hierarchical level with hring (one link per host: 2 hosts of
    4 sharing 1 Gbit/s each), the unmeasured choice keeps hring (it must win by the margin)
    and the measured one takes hierarchical into its round (policy.MEASURED_SLACK);
    nobody late, both keep hring."""
    from stragglar_mpi.decide.arrival import Arrival
    from stragglar_mpi.decide.policy import auto_algorithm
    from stragglar_mpi.decide.topology import Links, Topology, costs
    monkeypatch.delenv("STRAGGLAR_MODEL", raising=False)
    nodes = ((0, 1, 2, 3), (4, 5, 6, 7))
    topo = Topology(nodes, tuple(node_of(nodes)[r] for r in range(8)))
    links = Links(3e-5, 3.6e9, 5e-5, 125e6 / 4)
    model = costs(16 << 20, (topo, links), 8, None, None)
    ratio = model["hierarchical"].post_arrival / model["hring"].post_arrival
    assert 1 / 1.05 < ratio < 1.05, ratio            # level, as the box's 2x4 rows were priced
    late_ = [Arrival(tuple(range(8)), (0.0,) * 7 + (1.0,))] * 4
    prompt = [Arrival(tuple(range(8)), (0.0,) * 8)] * 4
    assert auto_algorithm(late_, 8, 16 << 20, (topo, links)) == "hring"
    assert auto_algorithm(late_, 8, 16 << 20, (topo, links), measured=True) == "hierarchical"
    assert auto_algorithm(prompt, 8, 16 << 20, (topo, links), measured=True) == "hring"


@pytest.mark.parametrize("nodes", [((0, 1, 2), (3, 4, 5), (6, 7)), ((0, 1, 2, 3, 4, 5, 6), (7,))])
def test_hring_closed_form_on_unequal_nodes_counts_the_lanes(nodes):
    # Unequal nodes cross on the smallest node's lanes only: each carries s/lanes, which
    # the closed form prices with ``lanes`` (auto and the report pass it) and not with k.
    from stragglar_mpi.schedule.simulate import Tiers
    a1, b1, a2, b2 = LINKS
    node_of = tuple(next(i for i, nd in enumerate(nodes) if r in nd) for r in range(8))
    sim = simulate(hring(nodes), GiB, a1, b1, None, Tiers(node_of, a2, b2)).finish
    m, k, lanes = len(nodes), max(map(len, nodes)), min(map(len, nodes))
    priced = costs(m, k, GiB, *LINKS, lanes)["hring"].post_arrival
    assert sim <= priced * 1.0001
    assert priced > costs(m, k, GiB, *LINKS)["hring"].post_arrival       # dearer than with k lanes
    assert sim == pytest.approx(priced, rel=0.25)


def test_costs_are_cached_and_each_caller_gets_its_own_dict():
    # auto prices every call: the second pricing is a cache hit, and a caller that
    # changes its dict does not change what the next caller reads.
    from stragglar_mpi.schedule import tiers
    args = (4, 2, 64 << 20, 1e-5, 3e9, 3e-5, 8e8)
    first = tiers.costs(*args)
    hits = tiers._costs.cache_info().hits
    first.pop("hring")
    second = tiers.costs(*args)
    assert tiers._costs.cache_info().hits == hits + 1
    assert "hring" in second and second["hierarchical"] == first["hierarchical"]
