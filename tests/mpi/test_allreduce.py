"""Allreduce against formulas and comm.Allreduce, at any world size.

Every rank fills its input from a formula of (rank, index) (helpers.py ``contribution``),
so the expected result is computed locally for any number of ranks.
"""
import numpy as np
import pytest
from mpi4py import MPI

import stragglar_mpi
from stragglar_mpi import Allreduce, stats
from helpers import CASES, assert_same_on_every_rank, contribution, expected, mpi_maps, really_late

ALGOS = ["stragglar", "ring", "rhd", "direct", "native", "auto", "hierarchical"]


@pytest.mark.parametrize("code,opname", CASES)
def test_every_dtype_and_op(comm, code, opname):
    n = comm.Get_size()
    if not mpi_maps(code):          # then we raise what mpi4py raises
        send = contribution(comm.Get_rank(), n, n + 5, code, opname)
        with pytest.raises(KeyError, match="cannot map"):
            Allreduce(comm, send, np.zeros_like(send), getattr(MPI, opname), algorithm="stragglar")
        return
    for count, algo in [(n + 5, "stragglar"), (2 * n + 1, ALGOS[(len(code) + len(opname)) % 4 + 1])]:
        send = contribution(comm.Get_rank(), n, count, code, opname)
        recv = np.zeros_like(send)
        Allreduce(comm, send, recv, getattr(MPI, opname), algorithm=algo)
        np.testing.assert_array_equal(recv, expected(n, count, code, opname), err_msg=f"{algo}")


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("count_kind", ["0", "1", "n-2", "n-1", "odd"])
def test_counts_algorithms_and_stragglers(comm, algo, count_kind):
    n, rank = comm.Get_size(), comm.Get_rank()
    count = {"0": 0, "1": 1, "n-2": max(n - 2, 0), "n-1": n - 1, "odd": 1009}[count_kind]
    for straggler in sorted({0, n // 2, n - 1}):
        really_late(comm, straggler)
        send = contribution(rank, n, count, "d", "SUM")
        recv = np.full(count, -1.0)
        Allreduce(comm, send, recv, MPI.SUM, algorithm=algo, straggler=straggler)
        ref = np.empty_like(recv)
        comm.Allreduce(send, ref, MPI.SUM)
        np.testing.assert_array_equal(recv, expected(n, count, "d", "SUM"))
        np.testing.assert_array_equal(recv, ref)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("form", ["IN_PLACE", "None"])
def test_in_place(comm, algo, form):
    n, rank = comm.Get_size(), comm.Get_rank()
    for code, opname in [("i", "SUM"), ("f", "MAX"), ("q", "BXOR")]:
        buf = contribution(rank, n, 3 * n + 2, code, opname)
        Allreduce(comm, MPI.IN_PLACE if form == "IN_PLACE" else None, buf, getattr(MPI, opname),
                  algorithm=algo, straggler=n // 2)
        np.testing.assert_array_equal(buf, expected(n, buf.size, code, opname))


@pytest.mark.parametrize("algo", ["stragglar", "ring", "rhd", "direct"])
def test_large_count_matches_native(comm, algo):
    n, rank = comm.Get_size(), comm.Get_rank()
    count = 1000003
    really_late(comm, n - 1)
    send = contribution(rank, n, count, "f", "SUM")
    recv = np.empty_like(send)
    ref = np.empty_like(send)
    Allreduce(comm, send, recv, MPI.SUM, algorithm=algo)
    comm.Allreduce(send, ref, MPI.SUM)
    np.testing.assert_array_equal(recv, ref)


@pytest.mark.parametrize("algo", ["stragglar", "ring", "rhd", "direct"])
@pytest.mark.parametrize("opname", ["SUM", "MAX", "PROD"])
def test_random_floats_bitwise_identical_on_every_rank(comm, algo, opname):
    n, rank = comm.Get_size(), comm.Get_rank()
    rng = np.random.default_rng(1234 + rank)
    send = rng.standard_normal(4 * n + 3)
    if opname == "MAX":
        send[::5] = np.nan          # NaN makes MAX order-dependent: both ends must agree
        send[1::7] = -0.0
    recv = np.empty_like(send)
    Allreduce(comm, send, recv, getattr(MPI, opname), algorithm=algo, straggler=0)
    assert_same_on_every_rank(comm, recv, "the result")
    ref = np.empty_like(send)
    comm.Allreduce(send, ref, getattr(MPI, opname))
    if opname == "SUM":
        np.testing.assert_allclose(recv, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.every_comm
def test_buffer_spec_forms(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    count = 2 * n + 3
    send = contribution(rank, n, count, "i", "SUM")
    want = expected(n, count, "i", "SUM")
    forms = [  # (send spec, receive spec, the slice that is reduced)
        (lambda a: [a, MPI.INT], lambda b: [b, MPI.INT], slice(0, count)),
        (lambda a: [a, count, MPI.INT], lambda b: [b, count, MPI.INT], slice(0, count)),
        (lambda a: [a, "i"], lambda b: [b, "i"], slice(0, count)),
        (lambda a: [a, count - 1, MPI.INT], lambda b: [b, count - 1, MPI.INT], slice(0, count - 1)),
        (lambda a: [a, (2, 1), MPI.INT], lambda b: [b, (2, 1), MPI.INT], slice(1, 3)),
    ]
    for spec_send, spec_recv, part in forms:
        recv = np.zeros(count, dtype="i")
        Allreduce(comm, spec_send(send), spec_recv(recv), MPI.SUM, algorithm="stragglar")
        np.testing.assert_array_equal(recv[part], want[part])
        untouched = np.ones(count, bool)
        untouched[part] = False
        assert not recv[untouched].any()


@pytest.mark.every_comm
def test_explicit_mpi_datatypes(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    pairs = [(MPI.INT8_T, "b"), (MPI.UINT16_T, "H"), (MPI.INT32_T, "i"), (MPI.UINT64_T, "Q"),
             (MPI.FLOAT, "f"), (MPI.C_DOUBLE_COMPLEX, "D"), (MPI.SIGNED_CHAR, "b"), (MPI.WCHAR, None)]
    for dt, code in pairs:
        if code is None:
            continue
        send = contribution(rank, n, n + 2, code, "SUM")
        recv = np.zeros_like(send)
        Allreduce(comm, [send, dt], [recv, dt], MPI.SUM, algorithm="stragglar")
        np.testing.assert_array_equal(recv, expected(n, n + 2, code, "SUM"))
    send = np.frombuffer(bytes((rank * 13 + i) % 256 for i in range(n + 4)), np.uint8).copy()
    recv = np.zeros_like(send)
    Allreduce(comm, [send, MPI.BYTE], [recv, MPI.BYTE], MPI.BXOR, algorithm="stragglar")
    ref = np.zeros_like(send)
    comm.Allreduce([send, MPI.BYTE], [ref, MPI.BYTE], MPI.BXOR)
    np.testing.assert_array_equal(recv, ref)


@pytest.mark.every_comm
def test_user_defined_commutative_op(comm):
    n, rank = comm.Get_size(), comm.Get_rank()

    def absmax(inbuf, inoutbuf, datatype):
        a = np.frombuffer(inbuf, dtype="d")
        b = np.frombuffer(inoutbuf, dtype="d")
        np.copyto(b, np.where(np.abs(a) > np.abs(b), a, b))

    op = MPI.Op.Create(absmax, commute=True)
    try:
        for algo in ["stragglar", "ring", "rhd", "direct"]:
            send = np.array([(-1.0) ** rank * (rank + i) for i in range(n + 3)])
            recv = np.zeros_like(send)
            Allreduce(comm, send, recv, op, algorithm=algo)
            ref = np.zeros_like(send)
            comm.Allreduce(send, ref, op)
            np.testing.assert_array_equal(recv, ref)
            assert_same_on_every_rank(comm, recv, "the result")
    finally:
        op.Free()


@pytest.mark.every_comm
def test_non_commutative_op_and_pair_types_take_native_path(comm):
    rank = comm.Get_rank()

    def first_wins(inbuf, inoutbuf, datatype):
        pass  # result is the inout operand: order-dependent

    op = MPI.Op.Create(first_wins, commute=False)
    try:
        send = np.full(4, float(rank))
        recv = np.zeros(4)
        Allreduce(comm, send, recv, op, algorithm="stragglar")
        ref = np.zeros(4)
        comm.Allreduce(send, ref, op)
        np.testing.assert_array_equal(recv, ref)
        assert stats(comm)["last"]["algorithm"] == "native"
    finally:
        op.Free()
    pair = np.dtype([("v", "f8"), ("i", "i4")], align=True)
    send = np.zeros(3, dtype=pair)
    send["v"] = [rank, -rank, rank % 2]
    send["i"] = rank
    recv = np.zeros_like(send)
    Allreduce(comm, [send, MPI.DOUBLE_INT], [recv, MPI.DOUBLE_INT], MPI.MAXLOC, algorithm="stragglar")
    ref = np.zeros_like(send)
    comm.Allreduce([send, MPI.DOUBLE_INT], [ref, MPI.DOUBLE_INT], MPI.MAXLOC)
    assert (recv['v'] == ref['v']).all() and (recv['i'] == ref['i']).all()
    assert stats(comm)["last"]["algorithm"] == "native"


def test_other_communicators(any_comm):
    c = any_comm
    n, rank = c.Get_size(), c.Get_rank()
    really_late(c, n - 1)
    send = contribution(rank, n, 3 * n + 1, "l", "SUM")
    recv = np.zeros_like(send)
    Allreduce(c, send, recv, MPI.SUM, algorithm="stragglar")
    np.testing.assert_array_equal(recv, expected(n, send.size, "l", "SUM"))


@pytest.mark.every_comm
def test_comm_subclass_is_drop_in(comm):
    c = stragglar_mpi.Comm(comm)
    n, rank = c.Get_size(), c.Get_rank()
    send = contribution(rank, n, 5 * n, "d", "SUM")
    recv = np.zeros_like(send)
    c.Allreduce(send, recv, MPI.SUM)
    np.testing.assert_array_equal(recv, expected(n, send.size, "d", "SUM"))
    for made in (c.Dup(), c.Split(rank % 2, rank), c.Create(c.Get_group()),
                 c.Create_group(c.Get_group())):
        assert isinstance(made, stragglar_mpi.Comm)
        m = made.Get_size()
        send = contribution(made.Get_rank(), m, 7, "i", "SUM")
        recv = np.zeros_like(send)
        made.Allreduce(send, recv)
        np.testing.assert_array_equal(recv, expected(m, 7, "i", "SUM"))
        made.Free()


@pytest.mark.every_comm
def test_stats_report_calls_and_phases(comm):
    c = comm.Dup()
    try:
        n = c.Get_size()
        send = np.ones(64 * n)
        recv = np.empty_like(send)
        Allreduce(c, send, recv, algorithm="stragglar")
        Allreduce(c, send, recv, algorithm="ring")
        Allreduce(c, send, recv, algorithm="native")
        s = stats(c)
        want = {"native": 3} if n == 1 else {"stragglar": 1, "ring": 1, "native": 1}
        assert s["calls"] == want
        for key in ("reduce_scatter", "wait", "post_arrival", "algorithm", "straggler"):
            assert key in s["last"]
        assert s["last"]["algorithm"] == "native"
    finally:
        c.Free()


@pytest.mark.every_comm
def test_user_point_to_point_is_never_matched_by_ours(comm):
    n, rank = comm.Get_size(), comm.Get_rank()
    if n == 1:
        return
    right, left = (rank + 1) % n, (rank - 1) % n
    token = np.array([rank * 1000.0])
    got = np.zeros(1)
    req_r = comm.Irecv(got, source=left, tag=0)       # tag 0: the tag of our round 0
    req_s = comm.Isend(token, dest=right, tag=0)
    send = np.full(4 * n, float(rank))
    recv = np.zeros_like(send)
    Allreduce(comm, send, recv, algorithm="stragglar")
    MPI.Request.Waitall([req_r, req_s])
    assert got[0] == left * 1000.0
    assert np.all(recv == sum(range(n)))
