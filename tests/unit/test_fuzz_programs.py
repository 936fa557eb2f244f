"""The fuzzer's generator (tests/fuzz/programs.py) without MPI: a program is a function
of its seed and world size, and every program it makes is legal (each request started
once and completed once, nothing used after it is freed), and keeps off the features
switched off."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

import programs  # noqa: E402

SEEDS = range(300)


def walk(prog):
    """Replay the actions symbolically; returns what the features-off checks need."""
    pending, active, preqs, freed = {}, set(), {}, set()
    seen = {"configure_pending": 0, "free_pending": 0, "cancel": 0, "mpi_start": 0}
    for i, a in enumerate(prog.actions):
        kind = a[0]
        if kind in ("blocking", "istart", "user", "pinit", "free_comm"):
            assert a[1] not in freed, (prog.seed, i, "a freed communicator used")
        if kind == "configure":
            seen["configure_pending"] += bool(pending)
        elif kind == "istart":
            assert a[4] not in pending
            pending[a[4]] = a[1]
        elif kind == "user" and a[5] is not None:
            pending[a[5]] = a[1]
        elif kind == "pinit":
            preqs[a[2]] = a[1]
        elif kind == "pstart":
            for p in a[1]:
                assert p in preqs and p not in active, (prog.seed, i, "Start of an active or freed request")
                assert preqs[p] not in freed
                active.add(p)
                pending[p] = preqs[p]
            seen["mpi_start"] += a[3].startswith("mpi_")
        elif kind in ("complete", "cancel"):
            reqs = a[1] if kind == "complete" else [a[1]]
            for q in reqs:
                assert q in pending, (prog.seed, i, "completion of a request not in flight")
                del pending[q]
                active.discard(q)
            seen["cancel"] += kind == "cancel"
        elif kind == "pfree":
            assert a[1] in preqs and a[1] not in active
            del preqs[a[1]]
        elif kind == "free_comm":
            busy = a[1] in pending.values() or a[1] in preqs.values()
            seen["free_pending"] += busy
            freed.add(a[1])
        elif kind == "end":
            assert not pending and not preqs, (prog.seed, "left in flight at the end")
    assert [c.cid for c in prog.comms if c.cid] == sorted(freed), prog.seed
    return seen


@pytest.mark.parametrize("n", [3, 4])
def test_programs_are_a_function_of_the_seed_and_legal(n):
    everything = programs.parse_features("all")
    counts = {}
    for seed in SEEDS:
        a, b = programs.generate(seed, n, everything), programs.generate(seed, n, everything)
        assert repr(a.actions) == repr(b.actions)
        for key, value in walk(a).items():
            counts[key] = counts.get(key, 0) + value
    assert all(counts.values()), counts        # with every feature on, each risky one occurs


@pytest.mark.parametrize("n", [3, 4])
def test_features_switched_off_are_not_generated(n):
    quiet = programs.parse_features("delay,late")      # every risky feature off
    for seed in SEEDS:
        prog = programs.generate(seed, n, quiet)
        assert not any(walk(prog).values()), seed
        single = any(min(map(len, programs.members_of(c, n).values())) == 1 for c in prog.comms)
        for a in prog.actions:
            if a[0] == "configure" and single:
                assert not ("STRAGGLAR_VALIDATE" in a[1] and "STRAGGLAR_TIMEOUT" in a[1]), seed


def test_feature_names():
    assert programs.parse_features("all,-cancel") == frozenset(programs.FEATURES) - {"cancel"}
    assert programs.parse_features("safe") == frozenset(programs.SAFE)
    with pytest.raises(ValueError, match="unknown fuzz feature"):
        programs.parse_features("cancle")


def test_expected_values_are_exact():
    members = (0, 1, 2, 3)
    for dtype in ("float64", "int64"):
        want = programs.expected(7, 3, members, 1000, dtype, "SUM")
        parts = [programs.inputs(7, 3, r, 1000, dtype) for r in members]
        assert np.array_equal(want, sum(p.astype(np.int64) for p in parts).astype(dtype))
        assert programs.mismatch(want, want) is None
        off = want.copy()
        off[5] += 1
        assert "first at [5]" in programs.mismatch(off, want)
    assert programs.expected(1, 1, members, 0, "float64", "MAX").shape == (0,)
