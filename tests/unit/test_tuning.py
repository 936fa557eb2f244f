"""auto's measured choice (decide/tuning.py) on synthetic timings: it takes the fastest,
every rank takes the same, it measures again later and follows a change; with a
straggler-aware model choice that choice is one more candidate."""
from types import SimpleNamespace

import numpy as np
import pytest

from stragglar_mpi.run._interpreter import drive
from stragglar_mpi.decide import roles as _roles
from stragglar_mpi.decide import tuning as _tuning
from stragglar_mpi.decide.arrival import Arrival
from stragglar_mpi.decide.tuning import (CLOSE_RUNS, GROWTH, RECHECK_FIRST, RECHECK_LAST,
                                         SYNCHRONOUS, Tuner, candidates, close_order, fastest,
                                         recheck_order, size_class, timings, trial_order)

MiB = 1 << 20


def immediately(value=None):
    """A step path that waits for nothing: ``value``."""
    return value
    yield  # makes this a generator


NAMES = ("hring", "rhd", "native")


class Ranks:
    """``n`` ranks in lockstep, each with its own Tuner; ``agree`` is the max over them."""

    def __init__(self, n, names=NAMES):
        self.tuners = [Tuner(names, clock=None) for _ in range(n)]
        self.marks = {}         # pass under way -> every rank's (entry, exit) of its runs
        self.runs = {}          # candidate -> how many times it ran (for ``seconds`` lists)

    def call(self, nbytes, seconds, model_choice="hring", skew=lambda rank: 0.0, t0=0.0, delay=0.0,
             prices=None):
        """One call on every rank: the same choice everywhere (asserted); a timed run takes
        ``seconds[name]`` (or its next value, for a list) from the last entry, each rank
        entering ``skew(rank)`` late."""
        picks = [t.choose(model_choice, nbytes, delay, prices) for t in self.tuners]
        assert len(set(picks)) == 1, picks
        name = picks[0]
        cls = self.tuners[0].timing
        if cls is None:
            return name
        took = seconds[name]
        if isinstance(took, list):
            took = took[self.runs.get(name, 0)]
        self.runs[name] = self.runs.get(name, 0) + 1
        last_entry = t0 + max(skew(r) for r in range(len(self.tuners)))
        key = (id(cls), cls.order)
        marks = self.marks.setdefault(key, [[] for _ in self.tuners])
        for rank in range(len(self.tuners)):
            marks[rank].append((t0 + skew(rank), last_entry + took))
        every = [np.array(m, dtype=np.float64).ravel() for m in marks]
        if len(marks[0]) == len(cls.order):
            del self.marks[key]
        for rank, tuner in enumerate(self.tuners):
            tuner.timed(*marks[rank][-1])
            if tuner.agreeing is not None:
                tuner.agreed(self._agree(tuner.agreeing, rank, every))
        return name

    def round(self, nbytes, seconds, model_choice="hring", situation=SYNCHRONOUS, **kw):
        """Calls until a round of (size class, situation) ends; the runs it made."""
        key = (size_class(nbytes), situation)
        done = self.tuners[0].classes[key].rounds if key in self.tuners[0].classes else 0
        ran = []
        while not ran or self.tuners[0].classes[key].rounds == done:
            ran.append(self.call(nbytes, seconds, model_choice, **kw))
        return ran

    @staticmethod
    def _agree(vector, rank, every):
        np.testing.assert_array_equal(vector, every[rank])      # the rank passes its own marks
        return np.maximum.reduce(every)

    def choices(self, nbytes, situation=SYNCHRONOUS):
        return {t.classes[size_class(nbytes), situation].choice for t in self.tuners}


def test_candidates_are_the_synchronous_algorithms():
    assert candidates(True) == ("hring", "rhd", "native")       # across nodes: not the flat ring
    assert candidates(False) == ("ring", "rhd", "native")       # one node: hring would be the ring


def test_size_classes_are_powers_of_two():
    assert size_class(16 * MiB) == size_class(32 * MiB - 1) == 24
    assert size_class(32 * MiB) == 25
    assert size_class(0) == size_class(1) == 0


def test_orders_first_round_model_first_then_reversed_rechecks_fastest_first():
    assert trial_order(NAMES, "native") == ("native", "hring", "rhd", "rhd", "hring", "native")
    assert trial_order(NAMES, "rhd", trials=1) == ("rhd", "hring", "native")
    assert recheck_order(NAMES, {"hring": 2.0, "rhd": 1.0, "native": 1.5}) == ("rhd", "native", "hring")
    assert recheck_order(NAMES, {}) == NAMES
    # over SLOWER times the fastest: every other round
    assert recheck_order(NAMES, {"hring": 1.1, "rhd": 1.0, "native": 6.0}) == ("rhd", "hring")
    assert recheck_order(NAMES, {"hring": 1.1, "rhd": 1.0, "native": 6.0}, ("native",)) == ("rhd", "hring", "native")


def test_a_second_pass_for_the_close_ones_only():
    assert close_order({"hring": 1.1, "rhd": 1.0, "native": 6.0}, NAMES) == \
        trial_order(("rhd", "hring"), "rhd", CLOSE_RUNS)
    assert close_order({"hring": 3.0, "rhd": 1.0, "native": 6.0}, NAMES) == ()


def test_a_candidate_takes_the_median_of_its_runs_and_a_tie_goes_to_the_earlier():
    assert timings({"a": [3, 5], "b": [0.060, 0.044, 0.050, 0.051, 0.052]}) == {"a": 4, "b": 0.051}
    assert fastest(("a", "b"), {"a": 3.0, "b": 2.0}) == "b"
    assert fastest(("a", "b"), {"b": 2.0, "a": 2.0}) == "a"


def test_it_takes_the_fastest_measured_not_the_model_choice():
    ranks = Ranks(4)
    seconds = {"hring": 0.050, "rhd": 0.045, "native": 0.200}
    ran = ranks.round(16 * MiB, seconds)
    # both passes: all twice, then the two within CLOSE of the fastest twice more
    assert ran == list(trial_order(NAMES, "hring") + trial_order(("rhd", "hring"), "rhd", CLOSE_RUNS))
    assert ranks.choices(16 * MiB) == {"rhd"}
    assert [ranks.call(16 * MiB, seconds) for _ in range(5)] == ["rhd"] * 5
    summary = ranks.tuners[0].summary()[16 * MiB][SYNCHRONOUS]
    assert summary["algorithm"] == "rhd" and summary["rounds"] == 1
    assert summary["measured"] == pytest.approx(seconds)


def test_the_second_pass_corrects_a_lucky_run():
    """hring's two first runs: one builds its plan, one is lucky (faster than rhd ever
    is); the best of two would take it, the median of five does not."""
    ranks = Ranks(2)
    seconds = {"hring": [0.060, 0.044, 0.050, 0.051, 0.049], "rhd": [0.046, 0.045, 0.045, 0.044, 0.046],
               "native": 0.200}
    ranks.round(16 * MiB, seconds)
    assert ranks.choices(16 * MiB) == {"rhd"}


def test_a_wide_spread_does_not_win_by_its_lucky_runs():
    """hierarchical's runs spread wide (measured so under load): its best runs beat
    hring's, its median does not; the median decides."""
    ranks = Ranks(2)
    seconds = {"hierarchical": [0.060, 0.018, 0.045, 0.050, 0.020], "hring": [0.030, 0.028, 0.027, 0.030, 0.029],
               "rhd": 0.100, "native": 0.200}
    ranks.round(16 * MiB, seconds, "hierarchical", "hierarchical", delay=0.3)
    assert ranks.choices(16 * MiB, "hierarchical") == {"hring"}


def test_every_rank_agrees_and_a_late_entry_does_not_count_against_a_candidate():
    """Rank 2 enters 30 ms late in rhd's runs only: times run from the last entry, so rhd
    still wins; every rank holds the same figures and choice."""
    ranks = Ranks(4)
    seconds = {"hring": 0.050, "rhd": 0.045, "native": 0.200}
    calls = 0

    def skew(rank):
        cls = ranks.tuners[0].classes[size_class(8 * MiB), SYNCHRONOUS]
        running = cls.order[len(cls.marks)]
        return 0.030 if rank == 2 and running == "rhd" else 0.001 * rank

    ranks.call(8 * MiB, seconds, t0=0.0)                 # the class exists from here
    while ranks.tuners[0].classes[size_class(8 * MiB), SYNCHRONOUS].rounds == 0:
        calls += 1
        ranks.call(8 * MiB, seconds, skew=skew, t0=float(calls))
    assert ranks.choices(8 * MiB) == {"rhd"}
    assert len({repr(t.summary()) for t in ranks.tuners}) == 1


def test_size_classes_are_measured_apart():
    ranks = Ranks(2)
    small = {"hring": 0.010, "rhd": 0.020, "native": 0.030}
    large = {"hring": 0.300, "rhd": 0.100, "native": 0.500}
    for _ in range(12):                              # interleaved sizes: each its own round
        ranks.call(8 * MiB, small)
        ranks.call(64 * MiB, large)
    assert ranks.choices(8 * MiB) == {"hring"} and ranks.choices(64 * MiB) == {"rhd"}


def test_rounds_come_back_at_doubling_gaps_and_follow_a_change():
    ranks = Ranks(2)
    before = {"hring": 0.050, "rhd": 0.045, "native": 0.200}    # native over SLOWER x the fastest
    after = {"hring": 0.040, "rhd": 0.045, "native": 0.200}     # the machine changed
    rounds, call, chosen_before = [], 0, None                   # (first call, first pass) of each round
    cls = None
    while call < 6000:
        call += 1
        idle = cls is None or (not cls.order and not cls.marks)
        ranks.call(16 * MiB, before if call < 3000 else after)
        cls = ranks.tuners[0].classes[size_class(16 * MiB), SYNCHRONOUS]
        if idle and (cls.order or cls.rounds > len(rounds)):
            rounds.append((call, cls.order))
        if call == 2999:
            chosen_before = ranks.choices(16 * MiB)
    assert rounds[0] == (1, trial_order(NAMES, "hring"))
    lengths = [len(trial_order(NAMES, "hring")) + 2 * CLOSE_RUNS]         # both passes
    lengths += [len(order) + 2 * CLOSE_RUNS for _, order in rounds[1:]]
    gaps = [b[0] - a[0] - n + 1 for a, b, n in zip(rounds, rounds[1:], lengths)]
    assert gaps[:5] == [RECHECK_FIRST * 2 ** i for i in range(5)]
    assert max(gaps) == RECHECK_LAST and len(rounds) <= 12     # 6000 calls: a dozen rounds
    # later rounds: each candidate once, the fastest first; native (4x) every other round
    assert [order for _, order in rounds[1:5]] == [("rhd", "hring"), ("rhd", "hring", "native")] * 2
    assert chosen_before == {"rhd"}
    assert ranks.choices(16 * MiB) == {"hring"}                # followed at the next round


def test_with_a_straggler_aware_model_choice_it_runs_only_where_it_is_faster():
    """The model expects a delay that pays: its choice is one more candidate (timed from
    the straggler's entry like the others), kept apart from the synchronous situation."""
    ranks = Ranks(4)
    loaded = {"hierarchical": 0.180, "hring": 0.150, "rhd": 0.155, "native": 1.0}
    late = lambda rank: 0.300 if rank == 3 else 0.0          # noqa: E731 (the straggler's delay)
    ran = ranks.round(64 * MiB, loaded, "hierarchical", "hierarchical", skew=late, delay=0.3)
    assert ran[:8] == list(trial_order(("hierarchical",) + NAMES, "hierarchical"))
    assert ran[0] == "hierarchical" and "native" not in ran[8:]
    assert ranks.choices(64 * MiB, "hierarchical") == {"hring"}
    assert ranks.call(64 * MiB, loaded, "hierarchical", skew=late, delay=0.3) == "hring"
    assert (size_class(64 * MiB), SYNCHRONOUS) not in ranks.tuners[0].classes
    # where it is faster, it runs
    ranks = Ranks(4)
    fast = dict(loaded, hierarchical=0.100)
    ranks.round(64 * MiB, fast, "hierarchical", "hierarchical", skew=late, delay=0.3)
    assert ranks.call(64 * MiB, fast, "hierarchical", skew=late, delay=0.3) == "hierarchical"


def test_a_delay_that_grows_is_measured_again_at_once():
    ranks = Ranks(2)
    short = {"hierarchical": 0.400, "hring": 0.150, "rhd": 0.155, "native": 1.0}
    ranks.round(64 * MiB, short, "hierarchical", "hierarchical", delay=0.05)
    cls = ranks.tuners[0].classes[size_class(64 * MiB), "hierarchical"]
    assert ranks.choices(64 * MiB, "hierarchical") == {"hring"} and not cls.order
    for _ in range(5):                                        # the same delay: its turn is later
        assert ranks.call(64 * MiB, short, "hierarchical", delay=0.05 * GROWTH) == "hring"
        assert not cls.order
    longer = dict(short, hierarchical=0.100)                  # now phase 1 hides in it
    ranks.call(64 * MiB, longer, "hierarchical", delay=0.05 * GROWTH * 1.1)
    assert "hierarchical" in cls.order                        # over SLOWER x, yet it runs
    ranks.round(64 * MiB, longer, "hierarchical", "hierarchical", delay=0.12)
    assert ranks.choices(64 * MiB, "hierarchical") == {"hierarchical"}
    assert cls.gap == 2 * RECHECK_FIRST and cls.rounds == 2  # the gaps started over


def test_the_delay_of_a_round_is_the_one_at_its_end():
    """The expected delay (a median of recent calls) lags a change: a round that began
    with the old one and ended with the new one measured the new one."""
    ranks = Ranks(2)
    seconds = {"hierarchical": 0.100, "hring": 0.150, "rhd": 0.155, "native": 1.0}
    calls = [0]

    def call():
        calls[0] += 1
        return ranks.call(64 * MiB, seconds, "hierarchical", delay=0.3 if calls[0] < 5 else 1.0)

    call()
    cls = ranks.tuners[0].classes[size_class(64 * MiB), "hierarchical"]
    while cls.rounds == 0:
        call()
    assert cls.delay == 1.0
    for _ in range(5):
        call()
    assert cls.rounds == 1 and not cls.order            # no second round for the same delay


def test_roles_asks_the_tuner_with_the_model_choice(monkeypatch):
    monkeypatch.delenv("STRAGGLAR_MODEL", raising=False)
    quiet = Arrival(tuple(range(8)), (0.0,) * 8)
    late = Arrival(tuple(range(8)), (0.0,) * 7 + (1.0,))
    tuner = Tuner(candidates(False), clock=lambda: 0.0)
    state = SimpleNamespace(auto_calls=0, history=[quiet] * 4, next_pair=100, pair_gap=4, table=None, auto_memo={},
                            tiers=lambda: None, tuning=tuner, log=None)
    state.arrivals = lambda: _Arrivals(quiet)   # unsampled, but a timed run: tracked (the report's)
    first = trial_order(candidates(False), "native")
    decided = drive(_roles.decide(state, _args("arrival")))
    assert decided[:4] == (first[0], None, True, True)
    assert decided[4] == ("timed", 1, len(first), True, False, False, 64 * MiB)   # decide/why.py's parts
    assert _tuning.picked(state)[1] is None                     # read once per call
    tuner.timing = None
    # a delay that pays: the model's straggler-aware choice is the first run of its round
    state.history = [late] * 8
    state.arrivals = lambda: _Arrivals(late)
    decided = drive(_roles.decide(state, _args(7)))
    assert decided[:4] == ("stragglar", 7, True, True) and decided[4][0] == "timed"
    assert tuner.classes[size_class(64 * MiB), "stragglar"].names == ("stragglar",) + candidates(False)
    assert tuner.classes[size_class(64 * MiB), SYNCHRONOUS].calls == 1


def _args(policy):
    """An "auto" call's arguments of 64 MiB on 8 ranks, as ``decide`` reads them."""
    return SimpleNamespace(name="auto", policy=policy, n=8, out=SimpleNamespace(count=64 * MiB, extent=1))


class _Arrivals:
    """The arrival table's interface, as roles() reads it, holding one record."""

    def __init__(self, record):
        self.seq, self.record = 1, record

    def arrive(self, deadline=0.0, entry=None):
        return immediately(0)

    def previous(self):
        return self.record

    def finish(self):
        pass


def test_without_a_tuner_the_model_choice_stands():
    state = SimpleNamespace(tuning=None)            # a nonblocking lane: no tuner
    assert _tuning.choose(state, "hring", 64 * MiB, 8) == "hring"
    assert _tuning.picked(state) == (False, None)


def test_the_model_rules_out_what_it_prices_wide_of_the_cheapest():
    """A candidate the model prices over WIDE times the cheapest is never timed; the
    model's choice is timed whatever its price, and one without a price is timed."""
    prices = {"hierarchical": 0.10, "hring": 0.14, "rhd": 0.40, "native": 0.26}
    ranks = Ranks(3)
    ran = set()
    seconds = {"hierarchical": 0.1, "hring": 0.15, "rhd": 0.5, "native": 0.3}
    for _ in range(40):
        ran.add(ranks.call(16 * MiB, seconds, "hierarchical", prices=lambda: prices))
    assert ran == {"hierarchical", "hring"}
    assert _tuning.within_margin(("hring", "rhd", "native"), {"hring": 1.0, "rhd": 9.0}, "rhd") == \
        ("hring", "rhd", "native")
    assert _tuning.within_margin(("hring", "rhd"), {}, "hring") == ("hring", "rhd")


def test_pruning_keeps_the_first_calls_cheap():
    """Over a job's first 50 calls with a persistent straggler, measuring costs little
    over running the fastest alone when the model rules out the slow candidates."""
    prices = {"hierarchical": 0.10, "hring": 0.14, "rhd": 0.40, "native": 0.30}
    seconds = {"hierarchical": 0.1, "hring": 0.15, "rhd": 0.45, "native": 0.5}
    pruned, every = Ranks(2), Ranks(2)
    total = lambda ranks, p: sum(seconds[ranks.call(16 * MiB, seconds, "hierarchical", prices=p)]  # noqa: E731
                                 for _ in range(50))
    cheap, dear = total(pruned, lambda: prices), total(every, None)
    assert cheap <= 1.1 * 50 * 0.1 < dear


def test_a_size_class_keeps_both_situations_and_the_report_names_them():
    """The synchronous situation is policy.SYNCHRONOUS (the model's synchronous choices),
    kept beside a straggler-aware one of the same size class; the report calls it so."""
    from stragglar_mpi.call.report import _measured
    from stragglar_mpi.decide.policy import SYNCHRONOUS as choices
    assert SYNCHRONOUS is choices
    ranks = Ranks(4)
    loaded = {"hierarchical": 0.180, "hring": 0.150, "rhd": 0.155, "native": 1.0}
    ranks.round(64 * MiB, loaded)
    ranks.round(64 * MiB, loaded, "hierarchical", "hierarchical", delay=0.3)
    assert list(ranks.tuners[0].summary()[64 * MiB]) == [SYNCHRONOUS, "hierarchical"]
    text = "\n".join(_measured(SimpleNamespace(tuning=ranks.tuners[0])))
    assert "from 64M, synchronous: hring (" in text and "from 64M, hierarchical: hring (" in text
