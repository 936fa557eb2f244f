"""The compiled transport's typed reduction loops give MPI_Reduce_local's results, bit for bit.

MAX and MIN of NaN and of signed zeros are MPICH's answers; MPI leaves them open, and
Open MPI's vectorised loops give others, so there the test keeps to ordinary numbers.
"""
import numpy as np
import pytest
from mpi4py import MPI

_interpreter = pytest.importorskip("stragglar_mpi.run._interpreter", reason="compiled transport not built")

SPECIALS = "MPICH" in MPI.Get_library_version()
TYPES = [("f", MPI.FLOAT), ("d", MPI.DOUBLE), ("i", MPI.INT32_T), ("q", MPI.INT64_T), ("l", MPI.LONG)]
OPS = ["SUM", "PROD", "MAX", "MIN", "BXOR"]


@pytest.mark.parametrize("code,dt", TYPES)
@pytest.mark.parametrize("opname", OPS)
def test_typed_loop_matches_reduce_local(code, dt, opname):
    op = getattr(MPI, opname)
    if opname == "BXOR" and code in "fd":
        return
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(1001) * 50).astype(code)
    b = (rng.standard_normal(1001) * 50).astype(code)
    if code in "fd" and (SPECIALS or opname not in ("MAX", "MIN")):
        a[::7], b[::11], a[3], b[3] = np.nan, np.nan, -0.0, 0.0
    want = b.copy()
    op.Reduce_local([a, dt], [want, dt])
    loop = _interpreter.loop_id(dt, op)
    assert (loop != 0) == (opname != "BXOR")
    got = b.copy()
    _interpreter.reduce_local(a, got, dt, op, loop)
    assert got.tobytes() == want.tobytes()
