"""The compiled entry (cython_src/call/_entry.pyx): every buffer form, its cache of bindings, mpi4py's errors.

A call that repeats an earlier one's arguments hits a binding; whatever changes
between calls (the memory, the count, the datatype, the op, the arguments, the
settings) must be seen: the call then misses, is checked again and gives the
answer a first call would.
"""
import array

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, Comm, stats
from stragglar_mpi.core.state import peek

ALGOS = ["stragglar", "ring", "native", "auto"]


def filled(comm, count, code="f", shift=0):
    return ((np.arange(count) + comm.Get_rank() + shift) % 7).astype(code)


def want(comm, count, code="f", shift=0, op=np.add):
    acc = ((np.arange(count) + shift) % 7).astype(code)
    for r in range(1, comm.Get_size()):
        acc = op(acc, ((np.arange(count) + r + shift) % 7).astype(code))
    return acc


def counters(comm):
    b = peek(comm).bindings
    return b.hits, b.misses


def hits_of(comm, run):
    """(hits, misses) that ``run()`` added on ``comm``."""
    h0, m0 = counters(comm)
    run()
    h1, m1 = counters(comm)
    return h1 - h0, m1 - m0


FORMS = {
    "array": lambda a, n, dt, code: a,
    "[buf, dt]": lambda a, n, dt, code: [a, dt],
    "[buf, count]": lambda a, n, dt, code: [a, n],
    "[buf, count, dt]": lambda a, n, dt, code: [a, n, dt],
    "(buf, count, dt)": lambda a, n, dt, code: (a, n, dt),
    "[buf, (count, displ), dt]": lambda a, n, dt, code: [a, (n, 1), dt],
    "[buf, count, displ, dt]": lambda a, n, dt, code: [a, n, 1, dt],
    "[buf, typecode]": lambda a, n, dt, code: [a, code],
}


def spec(form, arr, count, code):
    dt = MPI.Datatype.fromcode(code)
    return FORMS[form](arr, count, dt, code)


def both(comm, form, send, recv, count, code, op, algo, in_place=False):
    """Our call in ``form`` into ``recv``; mpi4py's into a copy; the two must agree bit for bit."""
    ref = recv.copy()
    comm.Allreduce(MPI.IN_PLACE if in_place else spec(form, send, count, code),
                   spec(form, ref, count, code), op)
    Allreduce(comm, MPI.IN_PLACE if in_place else spec(form, send, count, code),
              spec(form, recv, count, code), op, algorithm=algo)
    np.testing.assert_array_equal(recv, ref)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("algo", ["native", "stragglar"])
def test_every_form_hits_when_repeated_and_misses_when_changed(comm, form, algo):
    c = comm.Dup()
    try:
        n = c.Get_size()
        count = 4 * n + 3
        send, recv = filled(c, count + 1), np.full(count + 1, 99, np.float32)
        call = lambda s=send, r=recv, k=count, code="f", op=MPI.SUM: both(  # noqa: E731
            c, form, s, r, k, code, op, algo)
        call()
        call()                                                    # a binding now exists
        assert hits_of(c, call) == (1, 0)
        assert hits_of(c, lambda: call(filled(c, count + 1), recv.copy())) == (0, 1)  # memory moved
        assert hits_of(c, lambda: call(op=MPI.MAX)) == (0, 1)                      # op changed
        assert hits_of(c, lambda: call(k=count - 2)) == ((0, 1) if "count" in form else (1, 0))
        ints_s, ints_r = filled(c, count + 1, "i"), np.full(count + 1, 99, np.int32)
        call(ints_s, ints_r, code="i")
        assert hits_of(c, lambda: call(ints_s, ints_r, code="i")) == (1, 0)
        ints_r.dtype, ints_s.dtype = np.float32, np.float32       # same memory, other datatype
        ints_s[:] = filled(c, count + 1)                          # (the format, or the spec, changed)
        assert hits_of(c, lambda: call(ints_s, ints_r, code="f")) == (0, 1)
    finally:
        c.Free()


@pytest.mark.parametrize("form", list(FORMS))
def test_in_place_forms(comm, form):
    count = 2 * comm.Get_size() + 1
    for algo in ("native", "ring"):
        for shift in range(3):
            recv = filled(comm, count + 1, shift=shift)
            both(comm, form, None, recv, count, "f", MPI.SUM, algo, in_place=True)


@pytest.mark.parametrize("algo", ALGOS)
def test_buffers_taking_turns_all_hit(comm, algo):
    """Gradient buckets: several buffer pairs in rotation, each bound once."""
    c = comm.Dup()
    try:
        buckets = [(filled(c, 50 + 13 * k), np.zeros(50 + 13 * k, np.float32)) for k in range(5)]
        straggler = c.Get_size() - 1
        for s, r in buckets:                                  # the first round binds each
            Allreduce(c, s, r, algorithm=algo, straggler=straggler)
        h0, m0 = counters(c)
        for rnd in range(4):
            for k, (s, r) in enumerate(buckets):
                s[:] = filled(c, s.size, shift=rnd)
                Allreduce(c, s, r, algorithm=algo, straggler=straggler)
                np.testing.assert_array_equal(r, want(c, s.size, shift=rnd))
        h1, m1 = counters(c)
        assert (h1 - h0, m1 - m0) == (20, 0)
    finally:
        c.Free()


def test_more_buffers_than_bindings_stay_correct(comm):
    c = comm.Dup()
    try:
        buckets = [(filled(c, 20 + k), np.zeros(20 + k, np.float32)) for k in range(11)]
        for rnd in range(3):
            for s, r in buckets:
                Allreduce(c, s, r, algorithm="ring")
                np.testing.assert_array_equal(r, want(c, s.size))
        assert len(peek(c).bindings) <= 8
    finally:
        c.Free()


@pytest.mark.every_comm
def test_comm_allreduce_shares_the_bindings(comm):
    c = Comm(comm.Dup())
    try:
        send, recv = filled(c, 33), np.zeros(33, np.float32)
        c.Allreduce(send, recv)
        c.Allreduce(send, recv)
        assert hits_of(c, lambda: c.Allreduce(send, recv, MPI.SUM)) == (1, 0)
        assert hits_of(c, lambda: Allreduce(c, send, recv)) == (1, 0)
        np.testing.assert_array_equal(recv, want(c, 33))
    finally:
        c.Free()


@pytest.mark.every_comm
def test_a_native_hit_runs_compiled_and_counts(comm, monkeypatch, setenv):
    from stragglar_mpi.run import execute as _execute
    c = comm.Dup()
    try:
        send, recv = filled(c, 100), np.empty(100, np.float32)
        Allreduce(c, send, recv)                  # small: auto takes the native AllReduce
        Allreduce(c, send, recv)
        before = stats(c)["calls"]["native"]

        def python_path(*args):
            raise AssertionError("a native hit went through the Python path")
        monkeypatch.setattr(_execute, "native", python_path)
        for shift in range(3):
            send[:] = filled(c, 100, shift=shift)
            Allreduce(c, send, recv)
            np.testing.assert_array_equal(recv, want(c, 100, shift=shift))
        assert stats(c)["calls"]["native"] == before + 3
        assert stats(c)["last"]["algorithm"] == "native"
        setenv(STRAGGLAR_TIMEOUT="30")            # a timeout needs the tracked path: a new epoch
        with pytest.raises(AssertionError, match="Python path"):
            Allreduce(c, send, recv)
    finally:
        c.Free()


@pytest.mark.every_comm
def test_settings_read_again_by_configure_take_effect(comm, setenv):
    c = comm.Dup()
    try:
        send, recv = filled(c, 256), np.empty(256, np.float32)
        Allreduce(c, send, recv, algorithm="ring")
        Allreduce(c, send, recv, algorithm="ring")
        epoch = setenv(STRAGGLAR_ALGO="native").epoch
        assert hits_of(c, lambda: Allreduce(c, send, recv, algorithm="ring")) == (0, 1)
        assert stats(c)["last"]["algorithm"] == "native"
        with pytest.raises(ValueError, match="STRAGGLAR_ALGO"):
            setenv(STRAGGLAR_ALGO="bogus")
        with pytest.raises(ValueError, match="STRAGGLAR_ALGO"):   # refused on every call, too
            Allreduce(c, send, recv, algorithm="ring")
        assert setenv(STRAGGLAR_ALGO=None).epoch > epoch
        Allreduce(c, send, recv, algorithm="ring")
        assert stats(c)["last"]["algorithm"] == ("ring" if c.Get_size() > 1 else "native")
        np.testing.assert_array_equal(recv, want(c, 256))
    finally:
        c.Free()


@pytest.mark.every_comm
def test_changing_the_environment_alone_changes_nothing(comm, monkeypatch):
    send, recv = filled(comm, 16), np.empty(16, np.float32)
    Allreduce(comm, send, recv, algorithm="ring")
    monkeypatch.setenv("STRAGGLAR_ALGO", "native")            # no configure(): not read
    Allreduce(comm, send, recv, algorithm="ring")
    assert stats(comm)["last"]["algorithm"] == ("ring" if comm.Get_size() > 1 else "native")


@pytest.mark.every_comm
def test_a_receive_buffer_made_read_only_raises_again(comm):
    send, recv = filled(comm, 16), np.empty(16, np.float32)
    Allreduce(comm, send, recv, algorithm="stragglar")
    Allreduce(comm, send, recv, algorithm="stragglar")
    recv.flags.writeable = False
    with pytest.raises(BufferError):
        Allreduce(comm, send, recv, algorithm="stragglar")


@pytest.mark.every_comm
def test_a_changed_dtype_or_size_behind_the_same_object_is_seen(comm):
    send, recv = filled(comm, 32, "i"), np.zeros(32, np.int32)
    Allreduce(comm, send, recv, algorithm="stragglar")
    Allreduce(comm, send, recv, algorithm="stragglar")
    send.dtype, recv.dtype = np.float32, np.float32          # the same memory, read as floats
    send[:] = filled(comm, 32)
    Allreduce(comm, send, recv, algorithm="stragglar")
    np.testing.assert_array_equal(recv, want(comm, 32))
    recv.resize(4096, refcheck=False)                        # new memory behind the same object
    send.resize(4096, refcheck=False)
    send[:] = filled(comm, 4096)
    Allreduce(comm, send, recv, algorithm="stragglar")
    np.testing.assert_array_equal(recv, want(comm, 4096))


@pytest.mark.every_comm
def test_other_buffer_objects(comm):
    recv = array.array("f", bytes(4 * 8))
    for shift in range(3):
        send = array.array("f", filled(comm, 8, shift=shift).tobytes())
        Allreduce(comm, send, recv, algorithm="stragglar")
        np.testing.assert_array_equal(np.frombuffer(recv, np.float32), want(comm, 8, shift=shift))
    out = bytearray(8)
    Allreduce(comm, bytearray(b"\x01" * 8), out, MPI.BOR)
    assert out == bytearray(b"\x01" * 8)


@pytest.mark.every_comm
def test_zero_size_and_null_buffers_as_in_mpi4py(comm):
    Allreduce(comm, [None, MPI.INT], [None, MPI.INT])
    Allreduce(comm, [None, 0, MPI.INT], [None, 0, MPI.INT], MPI.MAX)
    Allreduce(comm, MPI.IN_PLACE, [None, MPI.INT])
    Allreduce(comm, [MPI.BOTTOM, 0, MPI.INT], [MPI.BOTTOM, 0, MPI.INT])
    Comm(comm).Allreduce([None, MPI.INT], [None, MPI.INT])
    empty = np.empty(0, np.float64)
    Allreduce(comm, empty, np.empty(0, np.float64), algorithm="stragglar")
    assert stats(comm)["last"]["algorithm"] == "native"


def _bad_specs():
    a, b = np.ones(4, np.float32), np.empty(4, np.float32)
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    return {
        "read-only recv bytes": (a, bytes(16)),
        "not a buffer": (5, b), "recv None": (a, None), "str": ("abcd", b),
        "5 items": ([a, 1, 2, 3, 4], b), "1 item": ([a], b),
        "negative count": ([a, -1, MPI.FLOAT], b), "count mismatch": ([a, 3, MPI.FLOAT], b),
        "datatype mismatch": ([a, MPI.INT], b),
        "negative displ": ([a, (1, -1), MPI.FLOAT], [b, 1, MPI.FLOAT]),
        "displ out of bounds": ([a, (1, 5), MPI.FLOAT], [b, 1, MPI.FLOAT]),
        "bad typecode": ([a, "zz"], b), "dtype name": ([a, "float64"], b),
        "None with a count": ([None, 3, MPI.INT], [None, 3, MPI.INT]),
        "None without datatype": ([None, 3], [b, 3]),
        "length not a multiple": (np.ones(5, np.uint8), [np.empty(8, np.uint8), MPI.INT]),
        "structured": (np.ones(2, "i4,f4"), np.ones(2, "i4,f4")),
        "op not an Op": (a, b, 3),
        "float count": ([a, 2.0, MPI.FLOAT], [b, 2.0, MPI.FLOAT]),
        "displ with null datatype": ([a, (1, 1), MPI.DATATYPE_NULL], b),
        "null datatype": ([a, MPI.DATATYPE_NULL], [b, MPI.DATATYPE_NULL]),
    }


#: What mpi4py raises for a bad buffer spec (which one: the case says).
SPEC_ERRORS = (TypeError, ValueError, KeyError, BufferError)


@pytest.mark.parametrize("case", list(_bad_specs()))
def test_bad_specs_raise_what_mpi4py_raises(comm, case):
    args = _bad_specs()[case]
    with pytest.raises(SPEC_ERRORS) as theirs:
        MPI.COMM_SELF.Allreduce(*args)
    for call in (lambda: Allreduce(comm, *args), lambda: Comm(comm).Allreduce(*args)):
        for _ in range(2):                                    # a miss is never kept
            with pytest.raises(type(theirs.value)) as ours:
                call()
            assert str(ours.value) == str(theirs.value)


@pytest.mark.every_comm
def test_read_only_numpy_receive_buffer_raises_buffer_error(comm):
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(BufferError):
        Allreduce(comm, np.ones(4, np.float32), ro)


@pytest.mark.every_comm
def test_stats_is_local_and_never_creates_the_state(comm):
    c = comm.Dup()
    try:
        if c.Get_rank() == 0:                 # the others are not in any call: no hang
            assert stats(c) == {"calls": {}, "last": {}}
            assert peek(c) is None
        send, recv = filled(c, 8), np.empty(8, np.float32)
        Allreduce(c, send, recv)
        if c.Get_rank() == c.Get_size() - 1:
            assert stats(c)["calls"] == {"native": 1}
        c.Barrier()
    finally:
        c.Free()
