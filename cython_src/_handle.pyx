# cython: language_level=3
"""One thing mpi4py has no Python call for: giving an existing request object a new handle.

A persistent ``stragglar_mpi`` request is a new generalized request on every Start;
the object the caller holds takes its handle, so that mpi4py's ``Request.Waitall``,
``Testall`` ... see the operation in flight (stragglar_mpi/_requests.py).
"""
from mpi4py cimport MPI


def adopt(MPI.Request target, MPI.Request source):
    """``target`` takes ``source``'s handle (``source`` keeps a copy; MPI frees it once)."""
    target.ob_mpi = source.ob_mpi
