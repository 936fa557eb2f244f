"""Mistakes and faults end in clear errors on every rank, never a hang or a wrong result."""
import os
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, StragglerTimeout, stats


@contextmanager
def env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def needs(n, comm):
    if comm.Get_size() < n:
        pytest.skip(f"needs {n} ranks")


def test_validation_names_the_rank_with_another_count(comm):
    needs(2, comm)
    n, rank = comm.Get_size(), comm.Get_rank()
    count = 10 + (rank == n - 1)
    with env(STRAGGLAR_VALIDATE=1):
        with pytest.raises(ValueError) as info:
            Allreduce(comm, np.ones(count), np.ones(count), algorithm="stragglar")
    text = str(info.value)
    assert "differ across ranks" in text and "count" in text and f"ranks {n - 1}: 11" in text


def test_validation_names_the_rank_with_another_algorithm_or_op(comm):
    needs(2, comm)
    rank = comm.Get_rank()
    with env(STRAGGLAR_VALIDATE=1):
        with pytest.raises(ValueError, match="algorithm") as info:
            Allreduce(comm, np.ones(8), np.ones(8), algorithm="ring" if rank == 1 else "stragglar")
        assert "ranks 1: 'ring'" in str(info.value)
        with pytest.raises(ValueError, match="op"):
            Allreduce(comm, np.ones(8), np.ones(8), MPI.MAX if rank == 0 else MPI.SUM)


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


def test_validation_passes_good_calls_through(comm):
    n = comm.Get_size()
    with env(STRAGGLAR_VALIDATE=1):
        for algo in ("stragglar", "ring", "native", "auto"):
            recv = np.zeros(16)
            Allreduce(comm, np.full(16, 2.0), recv, algorithm=algo)
            assert np.all(recv == 2.0 * n)


@pytest.mark.parametrize("algo", ["stragglar", "ring", "hierarchical"])
def test_timeout_names_the_missing_rank_and_the_phase(comm, algo):
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

    threads = [threading.Thread(target=worker, args=(k, c)) for k, c in enumerate(comms)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in comms:
        c.Free()
    assert not errors


def test_short_soak_keeps_state_bounded(comm):
    """A short version of tests/perf/soak.py: random calls; nothing grows."""
    from stragglar_mpi._state import state_of

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
        state = state_of(c)
        assert len(state.early_comms) <= n
        assert len(state.history) <= state.history.maxlen
        assert sum(stats(c)["calls"].values()) == 150
    finally:
        c.Free()


def test_early_comms_are_a_bounded_lru(comm, monkeypatch):
    """More stragglers than the cache holds: evicted sub-communicators are freed at the
    same call on every rank (the straggler keeps the same LRU order), results stay right."""
    needs(3, comm)
    from stragglar_mpi import _state
    from stragglar_mpi._state import state_of
    monkeypatch.setattr(_state, "EARLY_COMMS", 2)
    n, rank = comm.Get_size(), comm.Get_rank()
    c = comm.Dup()
    try:
        for it, late in enumerate(list(range(n)) * 2 + [0, 0, n - 1]):
            for algo in ("stragglar", "direct"):
                send = np.arange(7, dtype=np.float64) * (rank + 1) + it
                recv = np.zeros_like(send)
                Allreduce(c, send, recv, algorithm=algo, straggler=late)
                assert np.array_equal(recv, sum(np.arange(7.0) * (r + 1) + it for r in range(n)))
            comms = state_of(c).early_comms
            assert list(comms)[-1] == late and len(comms) <= 2
            assert (comms[late] is None) == (rank == late)
    finally:
        c.Free()
