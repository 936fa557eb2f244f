"""``stats(comm)["last"]["why"]``: each call says why it ran what it ran."""

import numpy as np
from mpi4py import MPI

from stragglar_mpi import Allreduce, stats


def _why(c, count, **kwargs):
    send = np.ones(count, dtype=np.float32)
    recv = np.empty_like(send)
    Allreduce(c, send, recv, MPI.SUM, **kwargs)
    assert recv[0] == c.Get_size()
    return stats(c)["last"]["why"]


def test_below_the_threshold_the_why_names_it(comm):
    c = comm.Dup()
    try:
        whys = [_why(c, 1024) for _ in range(3)]    # the 2nd and 3rd: native from C
        if c.Get_size() == 1:
            assert whys == ["native: one rank"] * 3
        else:
            assert whys == ["native: below auto's 4 MiB threshold (STRAGGLAR_AUTO_MIN_BYTES)"] * 3
    finally:
        c.Free()


def test_a_named_algorithm_says_so(comm):
    c = comm.Dup()
    n = c.Get_size()
    try:
        for _ in range(2):                          # a miss, then a hit of the binding
            why = _why(c, 1000, algorithm="stragglar", straggler=n - 1)
            assert why == ("native: one rank" if n == 1 else "stragglar: asked for by name")
        assert _why(c, 1000, algorithm="native") == ("native: one rank" if n == 1
                                                     else "native: asked for by name")
        assert ("one rank" if n == 1 else "non-commutative") in _why_op(c)
    finally:
        c.Free()


def _why_op(c):
    op = MPI.Op.Create(lambda a, b, t: None, commute=False)
    try:
        buf = np.ones(4, dtype=np.float32)
        Allreduce(c, MPI.IN_PLACE, buf, op, algorithm="ring")
        return stats(c)["last"]["why"]
    finally:
        op.Free()


def test_auto_says_it_measures_then_what_it_measured(comm):
    c = comm.Dup()
    try:
        whys = [_why(c, 1 << 20) for _ in range(3)]     # 4 MiB: auto decides from here
        if c.Get_size() == 1:
            assert whys == ["native: one rank"] * 3
            return
        assert all("measuring: " in w and "of auto's first round at 4 MiB" in w for w in whys)
        for _ in range(40):
            why = _why(c, 1 << 20)
            if stats(c)["last"]["auto"] == "measured":
                assert why.startswith(f"{stats(c)['last']['algorithm']}: measured fastest")
                return
        raise AssertionError(f"auto did not end its round in 43 calls: {why}")
    finally:
        c.Free()
