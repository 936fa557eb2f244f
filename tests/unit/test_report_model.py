"""The straggler report's text from synthetic records: a per-rank table whose figures
each come with the number of calls they rest on, and a "saved" that says its basis:
auto's measured time where it has one, else the model's estimate and where its figures
came from."""
from types import SimpleNamespace

import pytest

from stragglar_mpi.call.report import Log, render
from stragglar_mpi.core import config
from stragglar_mpi.decide.arrival import Arrival
from stragglar_mpi.decide.policy import SYNCHRONOUS
from stragglar_mpi.decide.topology import Links, Topology
from stragglar_mpi.decide.tuning import SizeClass, Tuner, candidates, size_class

MiB = 1 << 20


def late(rank, gap, n=4):
    """A record where ``rank`` came ``gap`` seconds after the others (who came at once)."""
    order = tuple(r for r in range(n) if r != rank) + (rank,)
    return Arrival(order, (0.0,) * (n - 1) + (gap,))


def table(text):
    """rank -> its row's fields (share, calls, p50, p95, calls, aware calls, saved, basis)."""
    rows = [line.split() for line in text.splitlines()]
    return {int(r[0]): r[1:] for r in rows if len(r) == 9 and r[0].isdigit()}


@pytest.fixture
def settings():
    """The settings in force for the test (``settings(model=...)``); the defaults after."""
    def use(**env):
        config.configure({f"STRAGGLAR_{k.upper()}": v for k, v in env.items()})
    use()
    yield use
    config.configure({})


def test_each_figure_comes_with_the_calls_it_rests_on(settings):
    log = Log(4, "t")
    for gap in (0.040, 0.050, 0.060):
        log.ran(late(1, gap), "rhd", None, 16 * MiB, 0.02)
    log.ran(late(3, 0.002), "native", None, 16 * MiB, 0.02)
    text = render(log, 4, "t")
    assert "t, 4 ranks, 4 recorded calls" in text
    rows = table(text)
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[1][:6] == ["75.0%", "4", "50.000", "60.000", "3", "0"]
    assert rows[3][:6] == ["25.0%", "4", "2.000", "2.000", "1", "0"]
    assert rows[0] == ["0.0%", "4", "-", "-", "0", "0", "-", "-"]
    assert "\nran: native 1, rhd 3\n" in text


def test_saved_is_an_estimate_of_the_default_guess_without_measurements(settings):
    log = Log(4, "t")
    log.ran(late(2, 0.25), "stragglar", 2, 16 * MiB, 0.004)
    text = render(log, 4, "t")
    assert table(text)[2][5:] == ["1", table(text)[2][6], "estimate"]
    line = next(ln for ln in text.splitlines() if ln.startswith("  16M (stragglar): "))
    assert line.startswith("  16M (stragglar): estimate, ")
    assert "alpha 1e-05 s, bandwidth 1e+09 B/s: the default guess STRAGGLAR_MODEL=1e-05,1e+09,1.05" in line


@pytest.mark.parametrize("model", ["2e-5,5e8,1.05", "1e-5,1e9,1.05,2e-5,1e8"])
def test_a_model_set_by_the_user_says_so(settings, model):
    settings(model=model)
    log = Log(3, "t")
    log.ran(late(2, 0.25, 3), "stragglar", 2, 8 * MiB, 0.004)
    text = render(log, 3, "t")
    shown = ",".join(f"{float(v):g}" for v in model.split(","))
    assert f": STRAGGLAR_MODEL={shown} set by you" in text, text
    assert "1 recorded calls" in text and table(text)[2][4] == "1", text


def test_links_measured_at_setup_are_fitted_here(settings):
    topology = Topology(((0, 1), (2, 3)), (0, 0, 1, 1))
    log = Log(4, "t", tiers=(topology, Links(1e-6, 5e9, 3e-5, 8e8)))
    log.ran(late(3, 0.25), "hierarchical", 3, 16 * MiB, 0.004)
    text = render(log, 4, "t")
    assert ("inside a node alpha 1e-06 s, bandwidth 5e+09 B/s; between nodes alpha 3e-05 s, "
            "bandwidth 8e+08 B/s: fitted here (the links measured at setup)") in text, text


def test_saved_rests_on_autos_measured_time_where_it_has_one(settings):
    tuner = Tuner(candidates(False), clock=None)
    k = size_class(16 * MiB)
    tuner.classes[k, SYNCHRONOUS] = SizeClass(candidates(False), "rhd", {"rhd": 0.030, "ring": 0.035})
    tuner.classes[k, "stragglar"] = SizeClass(("stragglar",) + candidates(False), "stragglar",
                                              {"stragglar": 0.010, "rhd": 0.025, "native": 0.040})
    log = Log(4, "t", tuning=tuner)
    log.ran(late(1, 0.05), "stragglar", 1, 16 * MiB, 0.015)
    log.ran(late(1, 0.05), "stragglar", 1, 64 * MiB, 0.050)      # a size auto has not timed
    text = render(log, 4, "t")
    row = table(text)[1]
    # the measured 25 ms (its own situation's rhd, not stragglar's 10) less 15, plus the estimate's
    assert row[5] == "2" and row[7] == "estimate+measured", text
    assert "  16M (stragglar): measured, 25.000 ms, auto's median time of rhd (decide/tuning.py)" in text
    assert "  64M (stragglar): estimate, " in text


def test_a_timed_class_without_synchronous_times_falls_back_to_the_synchronous_one():
    tuner = Tuner(candidates(False), clock=None)
    k = size_class(16 * MiB)
    tuner.classes[k, "stragglar"] = SizeClass(("stragglar",) + candidates(False), "stragglar",
                                              {"stragglar": 0.010})
    assert tuner.synchronous_time(16 * MiB, "stragglar") is None
    tuner.classes[k, SYNCHRONOUS] = SizeClass(candidates(False), "ring", {"rhd": 0.030, "ring": 0.030})
    assert tuner.synchronous_time(16 * MiB, "stragglar") == ("ring", 0.030)   # a tie: the table's order


def test_no_calls_say_what_is_recorded(settings):
    text = render(None, 4, "t")
    assert "0 recorded calls" in text and "timed by auto" in text


def test_the_bench_header_names_every_host():
    from stragglar_mpi.bench._sweep import _where
    assert _where({"host": "n1", "ranks": 8, "hosts": {"n1": 4, "n2": 4}}) == "2 hosts: n1 (4), n2 (4)"
    assert _where({"host": "vm", "ranks": 2, "hosts": {"vm": 2}}) == "vm"
    assert _where({"host": "vm", "ranks": 2}) == "vm"            # a JSON file from before
