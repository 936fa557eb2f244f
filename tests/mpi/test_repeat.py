"""A call that repeats the last one's arguments reuses its checks (stragglar_mpi._args.Repeat).

Whatever changes between two calls with the same objects (the memory behind
them, their dtype, writability, op, straggler, algorithm, settings) must be
seen: the second call then checks again and gives the answer a first call would.
"""
import array

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats
from stragglar_mpi._state import peek

ALGOS = ["stragglar", "ring", "native", "auto"]


def filled(comm, count, code="f", shift=0):
    return ((np.arange(count) + comm.Get_rank() + shift) % 7).astype(code)


def want(comm, count, code="f", shift=0, op=np.add):
    acc = filled(MPI.COMM_SELF, count, code, shift)
    for r in range(1, comm.Get_size()):
        acc = op(acc, ((np.arange(count) + r + shift) % 7).astype(code))
    return acc


def kept(comm):
    return peek(comm).repeat


@pytest.mark.parametrize("algo", ALGOS)
def test_repeated_calls_reuse_the_checks_and_stay_correct(any_comm, algo):
    send, recv = filled(any_comm, 1009), np.empty(1009, np.float32)
    Allreduce(any_comm, send, recv, algorithm=algo, straggler=any_comm.Get_size() - 1)
    first = kept(any_comm)
    assert first is not None
    for shift in range(1, 4):
        send[:] = filled(any_comm, 1009, shift=shift)
        Allreduce(any_comm, send, recv, algorithm=algo, straggler=any_comm.Get_size() - 1)
        np.testing.assert_array_equal(recv, want(any_comm, 1009, shift=shift))
        assert kept(any_comm) is first


def test_a_changed_argument_is_checked_again(comm):
    n = comm.Get_size()
    send, recv = filled(comm, 64), np.empty(64, np.float32)
    Allreduce(comm, send, recv, algorithm="ring")
    first = kept(comm)
    Allreduce(comm, send, recv, MPI.MAX, algorithm="ring")
    np.testing.assert_array_equal(recv, np.max([filled(MPI.COMM_SELF, 64, shift=r) for r in range(n)], 0))
    assert kept(comm) is not first
    Allreduce(comm, send, recv, MPI.MAX, algorithm="stragglar", straggler=0)
    assert stats(comm)["last"]["algorithm"] == ("stragglar" if n > 1 else "native")
    Allreduce(comm, MPI.IN_PLACE, recv, MPI.MAX, algorithm="stragglar", straggler=0)
    np.testing.assert_array_equal(recv, np.max([filled(MPI.COMM_SELF, 64, shift=r) for r in range(n)], 0))


def test_a_changed_dtype_or_address_is_seen(comm):
    send, recv = filled(comm, 32, "i"), np.zeros(32, np.int32)
    Allreduce(comm, send, recv, algorithm="stragglar")
    np.testing.assert_array_equal(recv, want(comm, 32, "i"))
    send.dtype, recv.dtype = np.float32, np.float32          # the same memory, read as floats
    send[:] = filled(comm, 32)
    Allreduce(comm, send, recv, algorithm="stragglar")
    np.testing.assert_array_equal(recv, want(comm, 32))
    recv.resize(4096, refcheck=False)                        # new memory behind the same object
    send.resize(4096, refcheck=False)
    send[:] = filled(comm, 4096)
    Allreduce(comm, send, recv, algorithm="stragglar")
    np.testing.assert_array_equal(recv, want(comm, 4096))


def test_a_receive_buffer_made_read_only_raises_again(comm):
    send, recv = filled(comm, 16), np.empty(16, np.float32)
    Allreduce(comm, send, recv, algorithm="stragglar")
    recv.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        Allreduce(comm, send, recv, algorithm="stragglar")


def test_settings_changed_between_calls_take_effect(comm, monkeypatch):
    send, recv = filled(comm, 256), np.empty(256, np.float32)
    Allreduce(comm, send, recv, algorithm="ring")
    monkeypatch.setenv("STRAGGLAR_ALGO", "native")
    Allreduce(comm, send, recv, algorithm="ring")
    assert stats(comm)["last"]["algorithm"] == "native"
    monkeypatch.setenv("STRAGGLAR_ALGO", "bogus")
    with pytest.raises(ValueError, match="STRAGGLAR_ALGO"):
        Allreduce(comm, send, recv, algorithm="ring")
    monkeypatch.delenv("STRAGGLAR_ALGO")
    Allreduce(comm, send, recv, algorithm="ring")
    assert stats(comm)["last"]["algorithm"] == ("ring" if comm.Get_size() > 1 else "native")
    np.testing.assert_array_equal(recv, want(comm, 256))


def test_buffers_other_than_arrays_and_list_specs_are_checked_every_call(comm):
    recv = array.array("f", bytes(4 * 8))
    for shift in range(2):
        send = array.array("f", filled(comm, 8, shift=shift).tobytes())
        Allreduce(comm, send, recv, algorithm="stragglar")
        np.testing.assert_array_equal(np.frombuffer(recv, np.float32), want(comm, 8, shift=shift))
        assert kept(comm) is None
    send, out = filled(comm, 8), np.empty(8, np.float32)
    Allreduce(comm, [send, 4, MPI.FLOAT], [out, 4, MPI.FLOAT], algorithm="stragglar")
    np.testing.assert_array_equal(out[:4], want(comm, 4))
    assert kept(comm) is None


def test_new_views_of_the_same_memory_repeat_and_other_memory_does_not(comm):
    big_send, big_recv = filled(comm, 2048), np.empty(2048, np.float32)
    Allreduce(comm, big_send[:1000], big_recv[:1000], algorithm="stragglar")
    first = kept(comm)
    Allreduce(comm, big_send[:1000], big_recv[:1000], algorithm="stragglar")
    assert kept(comm) is first
    np.testing.assert_array_equal(big_recv[:1000], want(comm, 2048)[:1000])
    Allreduce(comm, big_send[1000:2000], big_recv[1000:2000], algorithm="stragglar")
    assert kept(comm) is not first
    np.testing.assert_array_equal(big_recv[1000:2000], want(comm, 2048)[1000:2000])
    big_recv[:] = 0
    Allreduce(comm, big_send[1000:2000], big_recv[1000:2000], algorithm="stragglar")
    np.testing.assert_array_equal(big_recv[:1000], 0)
    np.testing.assert_array_equal(big_recv[1000:2000], want(comm, 2048)[1000:2000])


def test_a_native_repeat_runs_compiled_and_counts(comm, monkeypatch):
    from stragglar_mpi import _allreduce
    send, recv = filled(comm, 100), np.empty(100, np.float32)
    Allreduce(comm, send, recv)                  # small: auto takes the native AllReduce
    assert kept(comm).native
    before = stats(comm)["calls"].get("native", 0)

    def python_path(*args):
        raise AssertionError("a native repeat went through the Python path")
    monkeypatch.setattr(_allreduce, "_native", python_path)
    for shift in range(3):
        send[:] = filled(comm, 100, shift=shift)
        Allreduce(comm, send, recv)
        np.testing.assert_array_equal(recv, want(comm, 100, shift=shift))
    assert stats(comm)["calls"]["native"] == before + 3
    assert stats(comm)["last"]["algorithm"] == "native"
    monkeypatch.setenv("STRAGGLAR_TIMEOUT", "30")    # a timeout needs the tracked path
    with pytest.raises(AssertionError, match="Python path"):
        Allreduce(comm, send, recv)
    monkeypatch.undo()
    Allreduce(comm, send, recv)
    np.testing.assert_array_equal(recv, want(comm, 100, shift=2))
