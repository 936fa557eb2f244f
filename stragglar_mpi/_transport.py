"""Run a plan: the compiled transport (Cython, GIL released) or pure mpi4py.

``STRAGGLAR_TRANSPORT=python`` forces the pure-mpi4py one; a build without the
extension falls back to it with a one-line warning.
"""
from __future__ import annotations

import os
import warnings

from mpi4py import MPI

from ._plan import COPY, RECV, REDUCE, SEND

try:
    from . import _p2p
except ImportError as exc:  # a source checkout without the build
    _p2p = None
    _IMPORT_ERROR = exc
else:
    _IMPORT_ERROR = None

_warned = []


def name() -> str:
    """The transport that ``execute`` uses now: "cython" or "python"."""
    choice = os.environ.get("STRAGGLAR_TRANSPORT", "").strip().lower() or "cython"
    if choice not in ("cython", "python"):
        raise ValueError(f"STRAGGLAR_TRANSPORT must be 'cython' or 'python', not {choice!r}")
    if choice == "cython" and _p2p is None:
        if not _warned:
            warnings.warn(f"stragglar_mpi: compiled transport unavailable ({_IMPORT_ERROR}); "
                          "using the pure-mpi4py transport", RuntimeWarning, stacklevel=3)
            _warned.append(True)
        return "python"
    return choice


def execute(plan, addresses, comm, datatype, op, transport):
    """Run ``plan``; return the MPI_Wtime at which its first receive completed (or None)."""
    if plan.rows.shape[0] == 0:
        return None
    if transport == "cython":
        kernel = _p2p.kernel_id(datatype, op)
        return _p2p.execute(plan.rows, tuple(addresses), comm, datatype, op, plan.max_requests, kernel)
    return _execute_python(plan, addresses, comm, datatype, op)


def _execute_python(plan, addresses, comm, datatype, op):
    extent = datatype.Get_extent()[1]
    reqs, first, current = [], None, None
    for kind, rnd, peer, buf, off, count, buf2, off2 in plan.rows.tolist():
        if rnd != current:
            # A round starts only when this rank's part of the previous one is done.
            first, current = _complete(reqs, first), rnd
        spec = [MPI.buffer.fromaddress(addresses[buf] + off, count * extent), count, datatype]
        if kind == RECV:
            reqs.append(comm.Irecv(spec, peer, rnd % 32768))
        elif kind == SEND:
            reqs.append(comm.Isend(spec, peer, rnd % 32768))
        else:
            first = _complete(reqs, first)
            dst = [MPI.buffer.fromaddress(addresses[buf2] + off2, count * extent), count, datatype]
            if kind == REDUCE:
                op.Reduce_local(spec, dst)
            elif kind == COPY:
                dst[0][:] = spec[0]
    return _complete(reqs, first)


def _complete(reqs, first):
    """Complete ``reqs`` with a test-and-yield loop (never a blocking spin)."""
    if not reqs:
        return first
    while not MPI.Request.Testall(reqs):
        os.sched_yield()
    reqs.clear()
    return MPI.Wtime() if first is None else first
