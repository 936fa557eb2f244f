"""Allreduce on device arrays, run under the Numba CUDA simulator in CI.

Both GPU paths are covered: staging through host memory (STRAGGLAR_CUDA_AWARE=0)
and device pointers with reduction kernels (STRAGGLAR_CUDA_AWARE=1; the
simulator's "device" memory is host memory, so any MPI can carry it).  Every
result must equal, byte for byte, what the host path gives for the same input.
"""
import re

import numpy as np
import pytest
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats
from stragglar_mpi.memory import buffers as _buffers
from stragglar_mpi.memory import cuda as _cuda
from stragglar_mpi.memory import kernels as _kernels
from helpers import CASES, assert_same_on_every_rank, contribution, expected, in_threads, mpi_maps

cuda = pytest.importorskip("numba.cuda")
if not cuda.is_available():
    pytest.skip("no CUDA device and no simulator (set NUMBA_ENABLE_CUDASIM=1)", allow_module_level=True)

PATHS = ["staged", "aware"]


@pytest.fixture(autouse=True)
def small_world(world):
    if world.Get_size() > 4:
        pytest.skip("device tests run at 1-4 ranks (the simulator is slow)")


@pytest.fixture(params=PATHS)
def path(request, setenv):
    setenv(STRAGGLAR_CUDA_AWARE="1" if request.param == "aware" else "0",
           STRAGGLAR_CUDA_PIECE_BYTES="48")  # several staged pieces
    return request.param


def host_result(comm, send, opname, algorithm, in_place):
    out = send.copy() if in_place else np.zeros_like(send)
    Allreduce(comm, MPI.IN_PLACE if in_place else send, out, getattr(MPI, opname), algorithm=algorithm)
    return out


def device_result(comm, send, opname, algorithm, in_place):
    dsend = cuda.to_device(send)
    if in_place:
        Allreduce(comm, MPI.IN_PLACE, dsend, getattr(MPI, opname), algorithm=algorithm)
        return dsend.copy_to_host()
    dout = cuda.to_device(np.zeros_like(send))
    Allreduce(comm, dsend, dout, getattr(MPI, opname), algorithm=algorithm)
    return dout.copy_to_host()


@pytest.mark.parametrize("code,opname", CASES)
def test_every_dtype_and_op(comm, path, code, opname):
    if not mpi_maps(code):
        pytest.skip(f"this MPI has no datatype for {code!r}")
    n, rank = comm.Get_size(), comm.Get_rank()
    count = n + 3
    send = contribution(rank, n, count, code, opname)
    device_pointers = path == "aware" and (n == 1 or _kernels.supports(np.dtype(code), opname))
    for in_place in (False, True):
        got = device_result(comm, send, opname, "stragglar", in_place)
        assert stats(comm)["last"]["memory"] == ("device" if device_pointers else "staged")
        want = host_result(comm, send, opname, "stragglar", in_place)
        np.testing.assert_array_equal(got, want, err_msg=f"in_place={in_place}")
        if code not in "gG":  # long double has padding bytes that nobody writes
            assert got.tobytes() == want.tobytes(), f"in_place={in_place}"
        np.testing.assert_array_equal(got, expected(n, count, code, opname))


@pytest.mark.parametrize("algorithm", ["stragglar", "ring", "rhd", "direct", "native", "auto"])
def test_algorithms_and_stragglers(comm, path, algorithm, setenv):
    n, rank = comm.Get_size(), comm.Get_rank()
    if path == "staged":
        setenv(STRAGGLAR_CUDA_PIECE_BYTES="2048")
    for straggler, count in [(0, 2 * n + 1), (n - 1, 1000 if path == "staged" else 50), (n // 2, 1)]:
        send = contribution(rank, n, count, "d", "SUM")
        for in_place in (False, True):
            dsend = cuda.to_device(send)
            dout = dsend if in_place else cuda.device_array_like(send)
            Allreduce(comm, MPI.IN_PLACE if in_place else dsend, dout, MPI.SUM,
                      straggler=straggler, algorithm=algorithm)
            np.testing.assert_array_equal(dout.copy_to_host(), expected(n, count, "d", "SUM"))


def test_buffer_spec_forms(comm, path):
    n, rank = comm.Get_size(), comm.Get_rank()
    send = contribution(rank, n, 12, "i", "SUM")
    want = expected(n, 12, "i", "SUM")
    specs = [lambda d: d, lambda d: [d, MPI.INT], lambda d: [d, 12, MPI.INT], lambda d: (d, 12, "i"),
             lambda d: [d, (12, 0), MPI.INT], lambda d: [d, 12], lambda d: [d, "i"], lambda d: (d, MPI.INT),
             lambda d: [d, 12, 0, MPI.INT], lambda d: (d, [12, 0], "i"), lambda d: [d, (12, 0)]]
    for k, form in enumerate(specs):
        for algorithm in ("stragglar", "ring", "native"):
            dsend, dout = cuda.to_device(send), cuda.device_array(12, np.int32)
            Allreduce(comm, form(dsend), form(dout), MPI.SUM, algorithm=algorithm)
            np.testing.assert_array_equal(dout.copy_to_host(), want, err_msg=f"form {k} {algorithm}")
            dout = cuda.to_device(send)
            Allreduce(comm, None if k % 2 else MPI.IN_PLACE, form(dout), MPI.SUM, algorithm=algorithm)
            np.testing.assert_array_equal(dout.copy_to_host(), want, err_msg=f"in place, form {k} {algorithm}")
    for send_spec, recv_spec in [(lambda d: [d, (5, 4), MPI.INT], lambda d: [d, (5, 2), MPI.INT]),
                                 (lambda d: [d, 5, 4, "i"], lambda d: (d, 5, 2, MPI.INT))]:
        dsend, dout = cuda.to_device(send), cuda.to_device(np.full(12, -1, np.int32))
        Allreduce(comm, send_spec(dsend), recv_spec(dout), MPI.SUM)
        got = dout.copy_to_host()
        np.testing.assert_array_equal(got[2:7], expected(n, 9, "i", "SUM")[4:9])
        assert (got[:2] == -1).all() and (got[7:] == -1).all()


@pytest.mark.parametrize("algorithm", ["stragglar", "ring", "direct", "native"])
def test_mixed_host_and_device(comm, path, algorithm):
    n, rank = comm.Get_size(), comm.Get_rank()
    send = contribution(rank, n, 20, "f", "MAX")
    host_out = np.zeros_like(send)
    Allreduce(comm, cuda.to_device(send), host_out, MPI.MAX, algorithm=algorithm)
    np.testing.assert_array_equal(host_out, expected(n, 20, "f", "MAX"))
    assert stats(comm)["last"]["memory"] == "staged"      # one side on the host: staged
    dout = cuda.device_array_like(send)
    Allreduce(comm, [send, 20, MPI.FLOAT], [dout, 20, MPI.FLOAT], MPI.MAX, algorithm=algorithm)
    np.testing.assert_array_equal(dout.copy_to_host(), expected(n, 20, "f", "MAX"))
    # a rank may mix while the others do not: each rank's memory is its own business
    dsend = cuda.to_device(send) if rank % 2 else send
    out = np.zeros_like(send) if rank % 3 else cuda.device_array_like(send)
    Allreduce(comm, dsend, out, MPI.MAX, algorithm=algorithm)
    got = out if isinstance(out, np.ndarray) else out.copy_to_host()
    np.testing.assert_array_equal(got, expected(n, 20, "f", "MAX"))


def test_one_decision_per_call(comm, path, setenv):
    """A staged call is one call: one role decision and arrival round, one record in
    stats, and the host repeat cache keeps its bindings."""
    from stragglar_mpi.call.allreduce import state_of
    setenv(STRAGGLAR_CUDA_PIECE_BYTES="64")          # 1000 doubles: 125 pieces
    n, c = comm.Get_size(), comm.Dup()
    host, out = np.ones(16), np.zeros(16)
    Allreduce(c, host, out, algorithm="stragglar")   # straggler by arrival; bound
    state = state_of(c)
    calls, seq = sum(stats(c)["calls"].values()), state.tracked_seq
    d = cuda.to_device(np.full(1000, float(c.Get_rank())))
    Allreduce(c, MPI.IN_PLACE, d, algorithm="stragglar")
    np.testing.assert_array_equal(d.copy_to_host(), np.full(1000, n * (n - 1) / 2))
    assert sum(stats(c)["calls"].values()) == calls + 1
    last = stats(c)["last"]
    if n > 1:
        assert state.tracked_seq == seq + 1, "one arrival round"
        assert last["memory"] == ("device" if path == "aware" else "staged")
        assert_same_on_every_rank(c, last["straggler"], "the straggler")
    hits = state.bindings.hits
    Allreduce(c, host, out, algorithm="stragglar")
    assert state.bindings.hits == hits + 1, "the host call's binding was evicted"
    c.Free()


def test_device_buffers_without_numba_raise_clearly(comm, monkeypatch):
    d = cuda.to_device(np.ones(4))

    def missing():
        raise ImportError("No module named 'numba'")

    monkeypatch.setattr(_cuda, "numba_cuda", missing)
    with pytest.raises(RuntimeError, match="device buffers need Numba CUDA"):
        Allreduce(comm, d, np.zeros(4))
    assert _buffers.resolve(np.zeros(4), readonly=True).memory == "host"   # host calls do not care
    Allreduce(comm, np.ones(4), np.zeros(4))


def test_user_defined_op_is_staged(comm, path):
    n, rank = comm.Get_size(), comm.Get_rank()
    op = MPI.Op.Create(lambda a, b, dt: np.add(np.frombuffer(a, "d"), np.frombuffer(b, "d"),
                                                out=np.frombuffer(b, "d")), commute=True)
    try:
        send = contribution(rank, n, 9, "d", "SUM")
        dout = cuda.device_array_like(send)
        Allreduce(comm, cuda.to_device(send), dout, op)
        np.testing.assert_array_equal(dout.copy_to_host(), expected(n, 9, "d", "SUM"))
    finally:
        op.Free()


def _error(call):
    """(type, MPI error class, message without addresses) of what ``call`` raises."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the point is to compare whatever is raised
        error_class = exc.Get_error_class() if isinstance(exc, MPI.Exception) else None
        return type(exc), error_class, re.sub(r"0x[0-9a-f]+", "0x", str(exc))
    return None


BAD = {
    "non-contiguous send": lambda x, y: (x[::2], y[:5]),
    "non-contiguous recv": lambda x, y: (x[:5], y[::2]),
    "mismatched sizes": lambda x, y: (x, y[:4]),
    "mismatched dtypes": lambda x, y: (x, y.view(np.int64)),
    "count and datatype mismatch": lambda x, y: ([x, 10, MPI.DOUBLE], [y, 10, MPI.FLOAT]),
    "bad typecode": lambda x, y: ([x, "?x"], [y, "?x"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_device_input_raises_like_host(comm, path, case):
    host = BAD[case](np.zeros(10), np.zeros(10))
    dev = BAD[case](cuda.to_device(np.zeros(10)), cuda.to_device(np.zeros(10)))
    want = _error(lambda: Allreduce(comm, *host, MPI.SUM))
    assert want is not None
    assert _error(lambda: Allreduce(comm, *dev, MPI.SUM)) == want


@pytest.mark.parametrize("kwargs", [dict(op=MPI.SUM.handle), dict(straggler=99), dict(algorithm="nope")])
def test_bad_arguments_raise_like_host(comm, path, kwargs):
    args = {"op": MPI.SUM, **kwargs}
    want = _error(lambda: Allreduce(comm, np.zeros(4), np.zeros(4), **args))
    got = _error(lambda: Allreduce(comm, cuda.to_device(np.zeros(4)), cuda.device_array(4), **args))
    assert want is not None and got == want


def test_op_that_does_not_apply_raises_like_host(comm, path):
    want = _error(lambda: Allreduce(comm, np.zeros(4), np.zeros(4), MPI.BAND, algorithm="stragglar"))
    got = _error(lambda: Allreduce(comm, cuda.to_device(np.zeros(4)), cuda.device_array(4), MPI.BAND,
                                   algorithm="stragglar"))
    assert want is not None and got == want


class HostCAI:
    """Exposes __cuda_array_interface__ over host memory, as mpi4py's own tests do."""

    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = {"version": 3, "shape": array.shape, "typestr": array.dtype.str,
                                         "data": (array.ctypes.data, False), "strides": None}


def test_cuda_array_interface_over_host_memory_takes_host_path(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    send, out = contribution(rank, n, 7, "d", "SUM"), np.zeros(7)
    if _cuda.memory_kind(send.ctypes.data) == "host":
        assert _buffers.resolve(HostCAI(send), readonly=True).memory == "host"
    Allreduce(comm, HostCAI(send), HostCAI(out), MPI.SUM)
    np.testing.assert_array_equal(out, expected(n, 7, "d", "SUM"))


# --- threads: scratch per communicator, never one buffer for the process -------------------
@pytest.mark.parametrize("memories", [("device", "device"), ("host", "device")])
def test_threads_on_two_communicators(comm, path, setenv, memories):
    """Two threads call at once on two communicators (MPI_THREAD_MULTIPLE), with buffers
    of different sizes: every result is exact (one process-wide scratch mixed them up)."""
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("needs MPI_THREAD_MULTIPLE")
    setenv(STRAGGLAR_CUDA_PIECE_BYTES="2048")
    n = comm.Get_size()
    comms = [comm.Dup() for _ in memories]
    for c in comms:      # the first call on a communicator is collective set-up: not in threads
        Allreduce(c, np.ones(4), np.ones(4))
    errors = []

    def worker(k, c, memory):
        try:
            for it in range(6):
                count = 900 + 131 * k + 17 * it
                send = np.full(count, float(c.Get_rank() + 10 * it + k))
                want = sum(r + 10 * it + k for r in range(n))
                if memory == "host":
                    out = np.zeros_like(send)
                    Allreduce(c, send, out, algorithm="stragglar", straggler=n - 1)
                else:
                    dout = cuda.device_array_like(send)
                    Allreduce(c, cuda.to_device(send), dout, algorithm="stragglar", straggler=n - 1)
                    out = dout.copy_to_host()
                wrong = int(np.count_nonzero(out != want))
                if wrong:
                    errors.append(f"thread {k} call {it}: {wrong} of {count} wrong")
        except Exception as exc:   # surfaced below on the main thread
            errors.append(repr(exc))

    in_threads(worker, [(k, c, m) for k, (c, m) in enumerate(zip(comms, memories))])
    for c in comms:
        c.Free()
    assert not errors


def test_scratch_is_per_communicator(comm, path):
    """Two communicators never share device or pinned scratch."""
    from stragglar_mpi.call.allreduce import state_of
    n = comm.Get_size()
    comms = [comm.Dup(), comm.Dup()]
    for c in comms:
        d = cuda.to_device(np.ones(64))
        Allreduce(c, MPI.IN_PLACE, d, algorithm="stragglar", straggler=n - 1)
        np.testing.assert_array_equal(d.copy_to_host(), np.full(64, float(n)))
    pools = [state_of(c).pools for c in comms]
    assert pools[0] is not pools[1]
    for kind in set(pools[0]) & set(pools[1]):
        assert pools[0][kind] is not pools[1][kind]
    for c in comms:
        c.Free()
