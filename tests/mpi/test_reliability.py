"""Mistakes and faults end in clear errors on every rank, never a hang or a wrong result."""
import os
import threading
import time
from collections import deque

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, StragglerTimeout, stats
from helpers import LATE, TIMEOUT, env, in_threads, needs, timing_size


@pytest.mark.every_comm
def test_validation_names_the_rank_with_another_count(comm):
    needs(2, comm)
    n, rank = comm.Get_size(), comm.Get_rank()
    count = 10 + (rank == n - 1)
    with env(STRAGGLAR_VALIDATE=1):
        with pytest.raises(ValueError) as info:
            Allreduce(comm, np.ones(count), np.ones(count), algorithm="stragglar")
    text = str(info.value)
    assert "differ across ranks" in text and "count" in text and f"ranks {n - 1}: 11" in text


@pytest.mark.every_comm
def test_validation_names_the_rank_with_another_algorithm_or_op(comm):
    needs(2, comm)
    rank = comm.Get_rank()
    with env(STRAGGLAR_VALIDATE=1):
        with pytest.raises(ValueError, match="algorithm") as info:
            Allreduce(comm, np.ones(8), np.ones(8), algorithm="ring" if rank == 1 else "stragglar")
        assert "ranks 1: 'ring'" in str(info.value)
        with pytest.raises(ValueError, match="op"):
            Allreduce(comm, np.ones(8), np.ones(8), MPI.MAX if rank == 0 else MPI.SUM)


@pytest.mark.every_comm
def test_bad_buffer_on_one_rank_raises_everywhere(comm):
    needs(2, comm)
    rank = comm.Get_rank()
    recv = np.ones(8)
    if rank == 0:
        recv.flags.writeable = False
    with env(STRAGGLAR_VALIDATE=1):
        if rank == 0:
            with pytest.raises(BufferError):
                Allreduce(comm, np.ones(8), recv)
        else:
            with pytest.raises(ValueError, match="bad arguments on rank 0: BufferError"):
                Allreduce(comm, np.ones(8), recv)


@pytest.mark.every_comm
def test_validation_passes_good_calls_through(comm):
    n = comm.Get_size()
    with env(STRAGGLAR_VALIDATE=1):
        for algo in ("stragglar", "ring", "native", "auto"):
            recv = np.zeros(16)
            Allreduce(comm, np.full(16, 2.0), recv, algorithm=algo)
            assert np.all(recv == 2.0 * n)


@pytest.mark.parametrize("algo", ["stragglar", "ring", "hierarchical"])
def test_timeout_names_the_missing_rank_and_the_phase(world, algo):
    comm = world              # a timeout: on COMM_WORLD only (tests/mpi/conftest.py)
    needs(2, comm)
    n, rank = comm.Get_size(), comm.Get_rank()
    c = comm.Dup()            # this communicator's library state is unusable afterwards
    Allreduce(c, np.ones(4), np.ones(4), algorithm=algo)   # make the state before timing
    late = n - 1
    recv = np.zeros(64)
    with env(STRAGGLAR_TIMEOUT=0.5):
        if rank == late:
            time.sleep(1.5)
        t0 = time.monotonic()
        try:
            Allreduce(c, np.ones(64), recv, algorithm=algo)
            err = None
        except StragglerTimeout as exc:
            err = exc
        waited = time.monotonic() - t0
    assert waited < 3.0
    if rank != late:
        assert err is not None, "an early rank waited past the timeout without an error"
        assert err.missing == (late,)
        assert f"rank(s) {late} did not arrive" in str(err) and err.phase
    elif err is None:
        # The late rank may still finish from messages sent before the others gave up;
        # whatever it completes is right.
        assert np.all(recv == n)
    if err is not None:
        assert "unusable" in str(err)
        with pytest.raises(RuntimeError, match="unusable"):
            Allreduce(c, np.ones(4), np.ones(4))
    comm.Barrier()


def test_threads_on_different_communicators(comm):
    n = comm.Get_size()
    comms = [comm.Dup() for _ in range(3)]
    errors = []

    def worker(k, c):
        try:
            for it in range(25):
                send = np.full(200 + 37 * k, float(c.Get_rank() + it + k))
                recv = np.zeros_like(send)
                Allreduce(c, send, recv, algorithm=("stragglar", "ring", "rhd")[k])
                want = sum(r + it + k for r in range(n))
                if not np.all(recv == want):
                    errors.append((k, it))
        except Exception as exc:   # surfaced below on the main thread
            errors.append(exc)

    in_threads(worker, list(enumerate(comms)))
    for c in comms:
        c.Free()
    assert not errors


def test_short_soak_keeps_state_bounded(comm):
    """A short version of tests/perf/soak.py: random calls; nothing grows."""
    from stragglar_mpi.call.allreduce import state_of

    n, rank = comm.Get_size(), comm.Get_rank()
    c = comm.Dup()
    rng = np.random.default_rng(99)
    codes = ["f", "d", "i", "q", "b"]
    ops = [MPI.SUM, MPI.MAX, MPI.MIN, MPI.BXOR]
    try:
        for it in range(150):
            code = codes[rng.integers(len(codes))]
            op = ops[rng.integers(len(ops))]
            if op is MPI.BXOR and code in "fd":
                op = MPI.SUM
            count = int(rng.integers(0, 3000))
            policy = ["arrival", "predict", int(rng.integers(n))][rng.integers(3)]
            algo = ["stragglar", "auto", "ring", "direct"][rng.integers(4)]
            late, pause = int(rng.integers(n)), rng.random() < 0.5   # same draws on every rank
            if rank == late and pause:
                time.sleep(0.001)
            send = ((np.arange(count) + rank * 3 + it) % 5).astype(code)
            recv = np.zeros_like(send)
            Allreduce(c, send, recv, op, algorithm=algo, straggler=policy)
            ref = np.zeros_like(send)
            comm.Allreduce(send, ref, op)
            assert np.array_equal(recv, ref), (it, code, op, count, policy, algo)
        assert sum(stats(c)["calls"].values()) == 150
        state = state_of(c)
        if state.bindings is not None:               # many specs: the oldest bindings go
            assert len(state.bindings) <= 8
        if n > 1:                                    # more tracked calls than the history keeps
            keep = state.history.maxlen
            assert keep is not None
            for it in range(keep + 4):
                send = np.full(4 * n, rank + it, dtype=np.float64)
                Allreduce(c, MPI.IN_PLACE, send, algorithm="stragglar", straggler="arrival")
            assert len(state.history) == keep
        assert library_communicators(state, exclude=(c, comm)) == expected_communicators(state)
    finally:
        c.Free()


def library_communicators(state, exclude=(), depth=4):
    """The Fortran handles of every live MPI communicator reachable from ``state`` through
    attributes, lists, tuples, dicts and deques (``exclude``: the caller's)."""
    mine = {x.py2f() for x in exclude}
    found, seen = set(), set()

    def walk(obj, left):
        if id(obj) in seen or left < 0 or isinstance(obj, (str, bytes, np.ndarray, type)):
            return
        seen.add(id(obj))
        if isinstance(obj, MPI.Comm):
            if obj != MPI.COMM_NULL and obj.py2f() not in mine:
                found.add(obj.py2f())
            return
        if isinstance(obj, dict):
            items = list(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            items = list(obj)
        else:
            items = list(getattr(obj, "__dict__", {}).values())
        for item in items:
            walk(item, left - 1)

    walk(state, depth)
    return found


def expected_communicators(state):
    """What a user communicator costs the library: its private duplicate and, from 2 ranks,
    the arrival tables' duplicate; no sub-communicator of the early ranks, no node one."""
    made = {state.private.py2f()}
    if state._arrivals is not None:
        made.add(state._arrivals.comm.py2f())
    return made


def test_every_straggler_runs_on_the_private_duplicate_alone(comm):
    """Phase 1 is a plan on the private duplicate: a new straggler makes no communicator
    (MPI_Comm_create_group would block outside the deadline), results stay right."""
    from stragglar_mpi.call.allreduce import state_of
    n, rank = comm.Get_size(), comm.Get_rank()
    c = comm.Dup()
    try:
        for it, late in enumerate(list(range(n)) * 2 + [0, 0, n - 1]):
            for algo in ("stragglar", "direct"):
                send = np.arange(7, dtype=np.float64) * (rank + 1) + it
                recv = np.zeros_like(send)
                Allreduce(c, send, recv, algorithm=algo, straggler=late)
                assert np.array_equal(recv, sum(np.arange(7.0) * (r + 1) + it for r in range(n)))
                assert stats(c)["last"]["straggler"] == (late if n > 1 else None)
        state = state_of(c)
        assert library_communicators(state, exclude=(c, comm)) == expected_communicators(state)
    finally:
        c.Free()


# --- the reliability matrix: a missing rank at every step, on every rank -------------------
# Timing-based tests run at one world size only (4 ranks, helpers.py ``timing_size``): they
# sleep, and the machine is shared.  Bounds are generous; what they check is that nobody
# waits forever and that every waiting rank names the missing one.
def late_call(comm, late, call, **settings):
    """``call(c)`` on a fresh Dup with STRAGGLAR_TIMEOUT, ``late`` sleeping LATE s first;
    (error or None, seconds waited).  Every rank then meets at a Barrier."""
    return timed_call(comm, late, comm.Dup(), call, **settings)


def timed_call(comm, late, c, call, **settings):
    """``call(c)`` with STRAGGLAR_TIMEOUT, ``late`` sleeping LATE s first; (error or None,
    seconds waited).  Every rank then meets at a Barrier."""
    try:
        with env(STRAGGLAR_TIMEOUT=TIMEOUT, **settings):
            if comm.Get_rank() == late:
                time.sleep(LATE)
            t0 = time.monotonic()
            try:
                call(c)
                err = None
            except (StragglerTimeout, ValueError, RuntimeError) as exc:
                err = exc
            waited = time.monotonic() - t0
    finally:
        comm.Barrier()
    return err, waited


def assert_named(comm, late, err, waited, phase_words):
    """Every rank but ``late`` raised StragglerTimeout in time, naming ``late``."""
    if comm.Get_rank() == late:
        assert waited < TIMEOUT + 5, "the late rank waited far past its own timeout"
        if err is not None:
            assert isinstance(err, StragglerTimeout) and "unusable" in str(err)
        return
    assert isinstance(err, StragglerTimeout), f"an early rank got {err!r}"
    assert waited < TIMEOUT + 2.5, f"raised after {waited:.1f} s, the timeout is {TIMEOUT} s"
    assert err.missing == (late,), str(err)
    assert f"rank(s) {late} did not arrive" in str(err)
    assert phase_words in err.phase, err.phase


@pytest.mark.timeouts
def test_missing_rank_at_the_first_call(comm):
    timing_size(comm)
    recv = np.full(64, -1.0)
    err, waited = late_call(comm, 1, lambda c: Allreduce(c, np.ones(64), recv, algorithm="stragglar"))
    assert_named(comm, 1, err, waited, "setup")
    if comm.Get_rank() == 1:
        assert isinstance(err, StragglerTimeout)     # its setup has nobody to meet
    assert np.all(recv == -1.0)


@pytest.mark.timeouts
def test_missing_rank_at_a_new_straggler(comm):
    timing_size(comm)

    def call(c):
        Allreduce(c, np.ones(64), np.ones(64), algorithm="stragglar", straggler=3)   # warm-up
        comm.Barrier()
        if comm.Get_rank() == 1:
            time.sleep(LATE)
        Allreduce(c, np.ones(64), np.ones(64), algorithm="stragglar", straggler=2)

    c = comm.Dup()
    with env(STRAGGLAR_TIMEOUT=TIMEOUT):
        t0 = time.monotonic()
        try:
            call(c)
            err = None
        except StragglerTimeout as exc:
            err = exc
        waited = time.monotonic() - t0 - (LATE if comm.Get_rank() == 1 else 0)
    comm.Barrier()
    assert_named(comm, 1, err, waited, "phase 1" if comm.Get_rank() != 2 else "phase 2")
    # A new straggler makes no sub-communicator (phase 1 is a plan), so no library
    # thread is left inside a blocking MPI call (MPI_Finalize with one there crashed).
    until = time.monotonic() + 5
    while _library_threads() and time.monotonic() < until:
        time.sleep(0.01)
    assert not _library_threads()
    comm.Barrier()


def _library_threads():
    """The library's threads other than the nonblocking lanes' (idle between operations)
    and the stall watchdog's (it never blocks inside MPI: it probes and answers, and it
    ends at exit or when MPI is finalized: call/watchdog.py)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("stragglar_mpi")
            and t.name not in ("stragglar_mpi progress", "stragglar_mpi watchdog")]


@pytest.mark.timeouts
def test_different_straggler_values_do_not_hang(comm):
    timing_size(comm)
    rank = comm.Get_rank()
    c = comm.Dup()
    Allreduce(c, np.ones(64), np.ones(64), algorithm="stragglar", straggler=3)
    with env(STRAGGLAR_TIMEOUT=TIMEOUT):
        t0 = time.monotonic()
        with pytest.raises((StragglerTimeout, ValueError)):
            Allreduce(c, np.ones(64), np.ones(64), algorithm="stragglar", straggler=2 if rank == 0 else 3)
    assert time.monotonic() - t0 < TIMEOUT + 2.5
    comm.Barrier()


@pytest.mark.parametrize("case", ["phase 1", "phase 2", "native", "validate"])
@pytest.mark.timeouts
def test_missing_rank_at_each_step(comm, case):
    timing_size(comm)
    n = comm.Get_size()
    late = {"phase 2": n - 1}.get(case, 1)
    kwargs = {"phase 1": dict(algorithm="stragglar", straggler=n - 1),
              "phase 2": dict(algorithm="stragglar", straggler=n - 1),
              "native": dict(algorithm="native"),
              "validate": dict(algorithm="stragglar", straggler=n - 1)}[case]
    settings = {"STRAGGLAR_VALIDATE": 1} if case == "validate" else {}
    recv = np.full(256, -1.0)

    def call(c):
        with env(STRAGGLAR_TIMEOUT=0):
            Allreduce(c, np.ones(256), np.ones(256), **kwargs)   # set up, plans made
        recv[:] = -1.0
        comm.Barrier()
        if comm.Get_rank() == late:
            time.sleep(LATE)
        t_start[0] = time.monotonic()
        Allreduce(c, np.ones(256), recv, **kwargs)

    t_start = [0.0]
    c = comm.Dup()
    with env(STRAGGLAR_TIMEOUT=TIMEOUT, **settings):
        try:
            call(c)
            err = None
        except StragglerTimeout as exc:
            err = exc
        waited = time.monotonic() - t_start[0]
        raised = recv.copy()     # phase 1 may have finished before the wait that timed out
    comm.Barrier()
    words = {"phase 1": "phase 1", "phase 2": "phase 2", "native": "native",
             "validate": "argument check"}[case]
    if case == "phase 1" and comm.Get_rank() == n - 1:
        words = "phase 2"      # the straggler has no phase 1: it waits in phase 2
    assert_named(comm, late, err, waited, words)
    if comm.Get_rank() != late:
        time.sleep(0.3)
        assert np.array_equal(recv, raised), "the receive buffer was written after the call raised"
        if case not in ("phase 1", "phase 2"):     # the plans' receives land in it, and are cancelled
            assert np.all(recv == -1.0)
    elif err is None:
        assert np.all(recv == n)


@pytest.mark.timeouts
def test_two_missing_ranks_while_roles_are_found_by_arrival(comm):
    """straggler="arrival": the early ranks wait for n-1 ranks; two never come."""
    timing_size(comm)
    rank, lates = comm.Get_rank(), (1, 2)
    c = comm.Dup()
    Allreduce(c, np.ones(64), np.ones(64), algorithm="stragglar", straggler="arrival")
    comm.Barrier()
    with env(STRAGGLAR_TIMEOUT=TIMEOUT):
        if rank in lates:
            time.sleep(LATE + 0.5 * (rank == 2))
        t0 = time.monotonic()
        try:
            Allreduce(c, np.ones(64), np.ones(64), algorithm="stragglar", straggler="arrival")
            err = None
        except StragglerTimeout as exc:
            err = exc
        waited = time.monotonic() - t0
    comm.Barrier()
    if rank in lates:
        assert waited < TIMEOUT + 5
        return
    assert isinstance(err, StragglerTimeout) and waited < TIMEOUT + 2.5
    assert err.missing == lates and "arrival" in err.phase, str(err)


@pytest.mark.timeouts
def test_native_buffer_untouched_after_a_timeout_on_the_repeat_path(comm):
    """A repeat of a native call (a hit of the compiled entry's bindings) under a timeout
    runs as an Iallreduce into scratch memory (run/native.py): no write after the raise."""
    timing_size(comm)
    rank, late = comm.Get_rank(), 2
    c = comm.Dup()
    recv = np.zeros(1024, np.float32)
    with env(STRAGGLAR_TIMEOUT=TIMEOUT):
        for _ in range(3):
            Allreduce(c, np.ones(1024, np.float32), recv)          # auto: native, kept
        recv[:] = -1
        comm.Barrier()
        if rank == late:
            time.sleep(LATE)
        try:
            Allreduce(c, np.ones(1024, np.float32), recv)
            err = None
        except StragglerTimeout as exc:
            err = exc
    comm.Barrier()
    time.sleep(0.3)
    if rank != late:
        assert isinstance(err, StragglerTimeout) and err.missing == (late,)
        assert np.all(recv == -1)
    elif err is None:
        assert np.all(recv == comm.Get_size())


@pytest.mark.parametrize("aware", ["0", "1"])
@pytest.mark.timeouts
def test_missing_rank_with_device_buffers(comm, aware):
    timing_size(comm)
    from numba import cuda
    late = comm.Get_size() - 1
    host = np.ones(256, np.float32)
    recv = cuda.to_device(np.full(256, -1, np.float32))

    def call(c):
        Allreduce(c, cuda.to_device(host), recv, algorithm="stragglar", straggler=late)

    with env(STRAGGLAR_CUDA_AWARE=aware):
        err, waited = late_call(comm, late, call)   # the first call: the setup times out
        assert_named(comm, late, err, waited, "setup")
        c = comm.Dup()
        call(c)                                     # now set up; then phase 2 times out
        recv.copy_to_device(np.full(256, -1, np.float32))
        comm.Barrier()
        err, waited = timed_call(comm, late, c, call)
    assert_named(comm, late, err, waited, "phase 2")


@pytest.mark.parametrize("aware", ["0", "1"])
@pytest.mark.timeouts
def test_missing_early_rank_with_device_buffers(comm, aware):
    """An early rank never comes: with device buffers (CUDA-aware or staged) the others
    raise in phase 1 (the straggler in phase 2) and nothing writes the receive buffer
    after the raise (the plans' receives are cancelled)."""
    timing_size(comm)
    from numba import cuda
    n, rank, late = comm.Get_size(), comm.Get_rank(), 1
    recv = cuda.to_device(np.full(256, -1, np.float32))

    def call(c):
        Allreduce(c, cuda.to_device(np.ones(256, np.float32)), recv, algorithm="stragglar", straggler=n - 1)

    with env(STRAGGLAR_CUDA_AWARE=aware, STRAGGLAR_CUDA_PIECE_BYTES=256):
        c = comm.Dup()
        call(c)                                     # set up, plans made
        recv.copy_to_device(np.full(256, -1, np.float32))
        comm.Barrier()
        err, waited = timed_call(comm, late, c, call)
        raised = recv.copy_to_host()
    assert_named(comm, late, err, waited, "phase 2" if rank == n - 1 else "phase 1")
    if rank != late:
        time.sleep(0.3)
    untouched = np.array_equal(recv.copy_to_host(), raised)
    comm.Barrier()        # nobody leaves while others check (the launch ends without MPI_Finalize)
    assert untouched or rank == late, "the receive buffer was written after the call raised"


# --- mismatches without STRAGGLAR_VALIDATE ------------------------------------------------
@pytest.mark.parametrize("algo", ["stragglar", "rhd", "ring", "direct"])
@pytest.mark.timeouts
def test_count_mismatch_raises_never_wrong_data(comm, algo):
    """Counts 1000 against 1001 on one rank: the ranks that see a wrong-sized message
    raise naming the peer and the sizes; nobody returns a wrong result.  Every message,
    phase 1's too, is a plan's receive that must bring the count the plan expects
    (cython_src/run/_machine.pxi); the odd rank plays the straggler where the algorithm takes one."""
    timing_size(comm)
    n, rank = comm.Get_size(), comm.Get_rank()
    count = 1001 if rank == n - 1 else 1000
    recv = np.full(count, -1.0)
    c = comm.Dup()
    Allreduce(c, np.ones(8), np.ones(8), algorithm=algo, straggler=n - 1)   # set up, no timeout
    with env(STRAGGLAR_TIMEOUT=2):
        try:
            Allreduce(c, np.ones(count), recv, algorithm=algo, straggler=n - 1)
            err = None
        except (ValueError, StragglerTimeout) as exc:
            err = exc
    everyone = comm.allgather(None if err is None else (type(err).__name__, str(err)))
    if err is None:
        assert np.all(recv == n), "a rank returned a wrong result without an error"
    sized = [e for e in everyone if e and e[0] == "Mismatch"]
    assert sized, everyone
    assert all("the message from rank" in t and "plan expects" in t for _, t in sized), sized


@pytest.mark.every_comm
def test_validation_survives_any_exception_type(comm):
    """mpi4py raises KeyError for [x, "float64"]: the rank still takes part; the others
    raise naming it, at any length of its error text."""
    needs(2, comm)
    rank = comm.Get_rank()
    x = np.ones(8)
    for bad in ("float64", "f" * 6000):
        spec = [x, bad] if rank == 1 else x
        with env(STRAGGLAR_VALIDATE=1, STRAGGLAR_TIMEOUT=30):
            if rank == 1:
                with pytest.raises(KeyError):
                    Allreduce(comm, np.ones(8), spec, algorithm="stragglar")
            else:
                with pytest.raises(ValueError, match="bad arguments on rank 1: KeyError") as info:
                    Allreduce(comm, np.ones(8), spec, algorithm="stragglar")
                assert len(str(info.value)) > len(bad)
    recv = np.zeros(8)
    with env(STRAGGLAR_VALIDATE=1):
        Allreduce(comm, np.ones(8), recv, algorithm="stragglar")     # still in step
    assert np.all(recv == comm.Get_size())


@pytest.mark.every_comm
def test_validation_names_ops(comm):
    needs(2, comm)
    with env(STRAGGLAR_VALIDATE=1):
        with pytest.raises(ValueError, match=r"op \(ranks 0: MPI.MAX; ranks 1[^:]*: MPI.SUM\)"):
            Allreduce(comm, np.ones(8), np.ones(8), MPI.MAX if comm.Get_rank() == 0 else MPI.SUM)


# --- communicators the library does not run on --------------------------------------------
@pytest.mark.every_comm
def test_intercommunicators_take_the_native_path(comm):
    needs(2, comm)
    from stragglar_mpi import Comm
    rank, n = comm.Get_rank(), comm.Get_size()
    low = rank < n // 2
    half = comm.Split(int(low), rank)
    remote_leader = n // 2 if low else 0
    inter = half.Create_intercomm(0, comm, remote_leader, tag=11)
    remote = inter.Get_remote_size()
    recv = np.zeros(4)
    Allreduce(inter, np.full(4, 1.0), recv)
    assert np.all(recv == remote)
    ours = Comm(half).Create_intercomm(0, comm, remote_leader, tag=12)
    recv[:] = 0
    ours.Allreduce(np.full(4, 1.0), recv)
    assert np.all(recv == remote)
    merged = ours.Merge(not low)
    assert isinstance(merged, Comm)
    merged.Allreduce(np.full(4, 1.0), recv)
    assert np.all(recv == n)
    for made in (merged, ours, inter, half):
        made.Free()


# MPICH 5.0.2's MPI_Dist_graph_create never returns when ranks are split into emulated
# nodes, without this library too: `MPIR_CVAR_NUM_CLIQUES=2 mpiexec -n 4 python -c "from
# mpi4py import MPI; c = MPI.COMM_WORLD; r = c.rank; c.Create_dist_graph([r], [1], [(r + 1) % 4])"`
# hangs (and returns at once without the variable).
_EMULATED_NODES = (int(os.environ.get("MPIR_CVAR_NUM_CLIQUES") or 1) > 1
                   or os.environ.get("MPIR_CVAR_ODD_EVEN_CLIQUES", "0") not in ("", "0"))


def test_comm_wraps_topology_constructors(comm):
    from stragglar_mpi import Comm
    n, rank = comm.Get_size(), comm.Get_rank()
    ours = Comm(comm)
    made = [ours.Create_cart([n], [True]),
            ours.Create_graph(list(range(1, n + 1)), [(r + 1) % n for r in range(n)]),
            ours.Create_dist_graph_adjacent([(rank - 1) % n], [(rank + 1) % n])]
    if not _EMULATED_NODES:
        made.append(ours.Create_dist_graph([rank], [1], [(rank + 1) % n]))
    made.append(made[0].Sub([True]))
    for topo in made:
        assert isinstance(topo, Comm), type(topo)
        recv = np.zeros(4)
        topo.Allreduce(np.ones(4), recv)
        assert np.all(recv == n)
        assert stats(topo)["calls"]
    assert made[0].Get_topo()[0] == [n]
    for topo in made:
        topo.Free()
