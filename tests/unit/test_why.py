"""The reason a call gives for what it ran (decide/why.py), from each place that decides."""
from types import SimpleNamespace

from mpi4py import MPI

from stragglar_mpi.core import config as _config
from stragglar_mpi.decide.algorithm import for_arguments
from stragglar_mpi.decide.tuning import Tuner
from stragglar_mpi.decide.why import MODEL, size, text

MiB = 1 << 20


def _out(count, datatype=MPI.FLOAT):
    return SimpleNamespace(count=count, datatype=datatype, address=4096)


def test_below_autos_threshold_the_reason_names_it():
    settings = _config.current()
    name, why = for_arguments("auto", 4, _out(1024), MPI.SUM, settings)
    assert name == "native"
    assert text(name, None, why) == ("native: below auto's 4 MiB threshold "
                                     "(STRAGGLAR_AUTO_MIN_BYTES)")
    assert for_arguments("auto", 4, _out(MiB), MPI.SUM, settings) == ("auto", None)


def test_the_arguments_that_take_the_native_path_say_which():
    settings = _config.current()
    assert for_arguments("stragglar", 1, _out(MiB), MPI.SUM, settings)[1] == "one rank"
    assert "non-commutative" in for_arguments("ring", 4, _out(MiB), MPI.Op.Create(
        lambda a, b, t: None, commute=False), settings)[1]
    assert "nothing to reduce" in for_arguments("rhd", 4, _out(0), MPI.SUM, settings)[1]
    assert "pair" in for_arguments("rhd", 4, _out(MiB, MPI.DOUBLE_INT), MPI.MAXLOC, settings)[1]


def test_a_named_algorithm_says_so():
    assert text("stragglar", 3, ("named", "stragglar", False)) == "stragglar: asked for by name"
    assert text("ring", None, ("named", "ring", True)) == "ring: forced by STRAGGLAR_ALGO"
    assert text("stragglar", 3, ("named", "hierarchical", False)) == (
        "stragglar: hierarchical asked for by name, in its form for this layout")


def test_auto_says_it_measures_then_what_it_measured():
    tuner = Tuner(("native", "ring"), clock=lambda: 0.0)
    first = tuner.choose("native", 16 * MiB)
    assert text(first, None, tuner.pick) == (
        f"measuring: {first}, run 1 of 4 of auto's first round at 16 MiB")
    times = {"stragglar": 0.0123, "ring": 0.0201, "native": 0.03}
    assert text("stragglar", 1, ("measured", times, 0.1, True)) == (
        "stragglar: measured fastest with rank 1 late by about 100 ms "
        "(median 12.3 ms vs ring 20.1 ms)")
    assert text("ring", None, ("measured", times, 0.0, False)).startswith(
        "ring: measured fastest where nobody late enough for a straggler-aware algorithm")
    assert text("native", None, MODEL) == (
        "native: nobody late enough for a straggler-aware algorithm to pay "
        "(auto's cost model, unmeasured)")


def test_no_reason_kept_is_none_and_sizes_read_as_units():
    assert text("native", None, None) is None
    assert (size(16 * MiB), size(4608 * 1024), size(64 << 10), size(100)) == (
        "16 MiB", "4.5 MiB", "64 KiB", "100 B")
