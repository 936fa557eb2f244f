"""Straggler roles found at run time ("arrival", "predict") and the "auto" choice."""

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats
from stragglar_mpi.decide.policy import synchronous_algorithm
from stragglar_mpi.decide.tuning import CLOSE_RUNS, SYNCHRONOUS, size_class, trial_order
from stragglar_mpi.call.allreduce import state_of
from helpers import arrive_after_everyone_else, assert_same_on_every_rank, last_to_arrive, late, really_late


def fill(rank, it, count):
    return ((np.arange(count) * 3 + rank * 5 + it) % 17).astype(np.float32)


def want(n, it, count):
    return sum(fill(r, it, count) for r in range(n))


def test_arrival_roles_follow_the_late_rank(comm, world):
    n = comm.Get_size()
    c = comm.Dup()
    try:
        iters = 1000 if world.Get_size() == 4 else 30
        rng = np.random.default_rng(2024)          # same draws on every rank
        count = 4 * n + 3
        Allreduce(c, np.ones(count), np.ones(count), straggler="arrival", algorithm="stragglar")
        for it in range(iters):
            straggler = int(rng.integers(n))
            delay = rng.uniform(0.001, 0.01)
            send = fill(c.Get_rank(), it, count)
            recv = np.zeros_like(send)
            with last_to_arrive(c, straggler, delay):
                Allreduce(c, send, recv, algorithm="stragglar", straggler="arrival")
            np.testing.assert_array_equal(recv, want(n, it, count), err_msg=f"iteration {it}")
            last = stats(c)["last"]
            assert last["algorithm"] == ("native" if n == 1 else "stragglar")
            if n > 1:
                assert last["straggler"] == straggler, f"iteration {it}"
    finally:
        c.Free()


def test_arrival_with_nobody_late_and_ranks_arriving_together(comm):
    n = comm.Get_size()
    c = comm.Dup()
    try:
        for it in range(100):
            send = fill(c.Get_rank(), it, 2 * n + 1)
            recv = np.zeros_like(send)
            Allreduce(c, MPI.IN_PLACE, send, algorithm="stragglar", straggler="arrival") if it % 2 else \
                Allreduce(c, send, recv, algorithm="stragglar", straggler="arrival")
            got = send if it % 2 else recv
            np.testing.assert_array_equal(got, want(n, it, got.size))
            if n > 1:
                s = stats(c)["last"]["straggler"]
                assert_same_on_every_rank(c, s, "the straggler")
                assert 0 <= s < n
    finally:
        c.Free()


def test_direct_algorithm_takes_arrival_roles_too(comm):
    """``direct`` with "arrival": the rank that came last plays the straggler, as for
    ``stragglar`` (the late rank enters only once the others' roles are settled)."""
    n = comm.Get_size()
    c = comm.Dup()
    try:
        count = 3 * n
        Allreduce(c, np.ones(count), np.ones(count), algorithm="direct", straggler="arrival")
        for it in range(20):
            straggler = it % n
            if c.Get_rank() == straggler and n > 1:
                arrive_after_everyone_else(c)
            send = fill(c.Get_rank(), it, count)
            recv = np.zeros_like(send)
            Allreduce(c, send, recv, algorithm="direct", straggler="arrival")
            np.testing.assert_array_equal(recv, want(n, it, send.size))
            last = stats(c)["last"]
            assert last["algorithm"] == ("native" if n == 1 else "direct"), f"iteration {it}"
            if n > 1:
                assert last["policy"] == "arrival" and last["straggler"] == straggler, f"iteration {it}"
    finally:
        c.Free()


def test_predict_learns_a_persistent_straggler_without_waiting(comm):
    n = comm.Get_size()
    if n < 2:
        pytest.skip("needs two ranks")
    c = comm.Dup()
    try:
        slow = 1
        chosen = []
        for it in range(12):
            c.Barrier()
            send = fill(c.Get_rank(), it, 5 * n)
            recv = np.zeros_like(send)
            with late(c, slow, 0.05):        # by its arrival stamps: "predict" reads them alone
                Allreduce(c, send, recv, algorithm="stragglar", straggler="predict")
            np.testing.assert_array_equal(recv, want(n, it, send.size))
            chosen.append(stats(c)["last"]["straggler"])
        assert_same_on_every_rank(c, chosen, "the stragglers")
        assert chosen[0] == n - 1                  # no history yet: the last rank
        assert chosen[-5:] == [slow] * 5
    finally:
        c.Free()


def test_auto_goes_native_without_delay_and_stragglar_with_one(comm, setenv):
    # The model's choices: fixed links (1 GB/s inside a node, 0.27 GB/s between), not a
    # ping-pong under load (on two nodes of two the measured ones put hierarchical within a
    # few percent of hring), and no measured runs (the load would decide).
    setenv(STRAGGLAR_MODEL="1e-5,1e9,1.05,3e-5,2.7e8", STRAGGLAR_AUTO_MEASURE=0)
    n = comm.Get_size()
    c = comm.Dup()
    try:
        count = 1 << 20                              # 4 MiB of float32: at the small-size cut
        send = fill(c.Get_rank(), 0, count)
        recv = np.zeros_like(send)
        expected = want(n, 0, count)
        for it in range(4):
            c.Barrier()
            Allreduce(c, send, recv)
            np.testing.assert_array_equal(recv, expected)
            if it == 0:      # no history yet: no reason to expect a straggler, so a
                # synchronous AllReduce, with no roles: the MPI's own on one node; across
                # nodes the hierarchical ring where the fixed two-tier model prices it lower
                first, tiers = stats(c)["last"], state_of(c).tiers()
                if tiers is None:
                    assert first["algorithm"] == "native", first
                else:
                    assert first["algorithm"] in ("native", "hring"), first
                    assert first["algorithm"] == synchronous_algorithm(count * 4, tiers), first
                assert first["straggler"] is None, first
        picks = []
        for it in range(16):                 # a sampled pair sees the delay, then the history
            c.Barrier()                      # everyone starts together; the last rank is late
            really_late(c, n - 1, 0.05)      # for real: the roles by arrival must name it
            Allreduce(c, send, recv)
            np.testing.assert_array_equal(recv, expected)
            picks.append(stats(c)["last"]["algorithm"])
        assert_same_on_every_rank(c, picks, "the algorithms")
        if state_of(c).tiers() is not None:   # across nodes: the two-tier model (issue 14)
            assert picks[-1] in ("stragglar", "hierarchical"), picks
            assert stats(c)["last"]["straggler"] == n - 1
        elif n >= 4:   # the cost model: at n <= 3 StragglAR cannot beat a synchronous AllReduce
            assert picks[-1] == "stragglar" and stats(c)["last"]["straggler"] == n - 1
        else:
            assert picks[-1] == "native"
        small = np.ones(8, np.float32)
        Allreduce(c, MPI.IN_PLACE, small)
        assert stats(c)["last"]["algorithm"] == "native" and small[0] == n
    finally:
        c.Free()


def test_auto_runs_the_synchronous_algorithm_it_measured_fastest(comm, setenv):
    """Nobody late: the first calls of a size run every synchronous candidate twice, in
    the same order on every rank, then the close ones twice more; every rank holds the
    same times (an Iallreduce per pass) and runs the fastest of them, across nodes as on
    one.  A margin no delay can pay keeps the model's choice synchronous: a rank
    descheduled under load must not look like a straggler here."""
    n = comm.Get_size()
    if n < 2:
        pytest.skip("needs two ranks")
    setenv(STRAGGLAR_MODEL="1e-5,1e9,1e6")
    c = comm.Dup()
    try:
        count = 1 << 20                              # 4 MiB of float32: auto decides from here
        send = fill(c.Get_rank(), 1, count)
        recv = np.zeros_like(send)
        ran, how = [], []

        def call():
            c.Barrier()
            Allreduce(c, send, recv)
            np.testing.assert_array_equal(recv, want(n, 1, count))
            ran.append(stats(c)["last"]["algorithm"])
            how.append(stats(c)["last"]["auto"])

        call()
        tuner = state_of(c).tuning
        cls = tuner.classes[size_class(count * 4), SYNCHRONOUS]
        order = trial_order(cls.names, synchronous_algorithm(count * 4, state_of(c).tiers()))
        assert set(cls.names) <= set(tuner.names)          # those the model does not rule out
        assert ("hring" in tuner.names) == (state_of(c).tiers() is not None)
        while cls.rounds == 0:
            assert len(ran) < len(order) + CLOSE_RUNS * len(tuner.names)
            call()
        rounds = len(ran)
        call()
        call()
        summary = tuner.summary()[1 << size_class(count * 4)][SYNCHRONOUS]
        assert_same_on_every_rank(c, (ran, repr(summary)), "the runs and the tuner")
        assert tuple(ran[:len(order)]) == order and how[:rounds] == ["timed"] * rounds
        assert set(ran[len(order):rounds]) <= set(tuner.names)     # the close ones' second pass
        best = min(summary["measured"], key=summary["measured"].get)
        assert summary["algorithm"] == best and summary["rounds"] == 1
        assert ran[rounds:] == [best] * 2 and how[rounds:] == ["measured"] * 2
    finally:
        c.Free()


def test_auto_measures_its_straggler_aware_choice_against_the_synchronous_ones(comm, setenv):
    """The last rank late: the model's straggler-aware choice runs in a round with the
    synchronous algorithms (as the straggler: the late rank), every rank the same, and
    the fastest of them runs after it."""
    n = comm.Get_size()
    if n < 4:
        pytest.skip("StragglAR cannot beat a synchronous AllReduce below 4 ranks")
    setenv(STRAGGLAR_MODEL="1e-5,1e9,1.05,3e-5,2.7e8")
    c = comm.Dup()
    try:
        count = 1 << 20
        send = fill(c.Get_rank(), 2, count)
        recv = np.zeros_like(send)
        ran = []

        def call():
            c.Barrier()
            really_late(c, n - 1, 0.05)     # for real: the tuner times the runs
            Allreduce(c, send, recv)
            np.testing.assert_array_equal(recv, want(n, 2, count))
            last = stats(c)["last"]
            ran.append((last["algorithm"], last["straggler"], last["auto"]))

        tuner = None
        for _ in range(40):
            call()
            tuner = state_of(c).tuning
            aware = [k for k in tuner.classes if k[1] != SYNCHRONOUS]
            if aware and tuner.classes[aware[0]].rounds:
                break
        assert aware and tuner.classes[aware[0]].rounds == 1, ran
        call()
        choice = tuner.classes[aware[0]].choice
        assert_same_on_every_rank(c, (ran, repr(tuner.summary())), "the runs and the tuner")
        timed = [r for r in ran if r[2] == "timed"]
        names = set(tuner.classes[aware[0]].names)    # those the model did not rule out
        synchronous = {a for k, c in tuner.classes.items() if k[1] == SYNCHRONOUS for a in c.names}
        assert names <= {a for a, _, _ in timed} <= names | synchronous
        stragglers = [s for a, s, _ in timed if a == aware[0][1]]
        assert stragglers.count(n - 1) >= len(stragglers) - 1   # a rank descheduled longer, once
        assert ran[-1][:1] == (choice,) and ran[-1][2] == "measured"
    finally:
        c.Free()


@pytest.mark.every_comm
def test_bad_policy_names_raise_before_any_message(comm):
    with pytest.raises(ValueError, match="arrival"):
        Allreduce(comm, np.ones(4), np.ones(4), straggler="last")
    with pytest.raises(TypeError):
        Allreduce(comm, np.ones(4), np.ones(4), straggler=1.5)
