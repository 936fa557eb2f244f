"""What the MPI library under mpi4py has beyond MPI-3.1, found at run time.

The compiled extension says what it was built for (``_interpreter.built_for()``: mpi.h's
MPI_VERSION when it was compiled); this module says what the library running now has.
Open MPI 4.1 and 5, MVAPICH2 and Intel MPI 2021 report MPI 3.1; MPICH 4+ reports 4.x.
"""
from __future__ import annotations

from functools import lru_cache

from mpi4py import MPI


# Without large-count calls, mpi4py refuses more elements than this in one call (MPI_ERR_ARG).
INT_MAX = 2**31 - 1
PIECE = 2**30     # what the library sends or reduces at a time above INT_MAX (mpi_compat.h too)


@lru_cache(maxsize=None)
def large_count() -> bool:
    """The MPI-4 large-count calls (``MPI_Isend_c`` ...)."""
    return MPI.Get_version() >= (4, 0)


def pieces(count):
    """(offset, count) pieces of ``count`` elements that every MPI call accepts."""
    if count <= INT_MAX or large_count():
        return [(0, count)]
    return [(start, min(PIECE, count - start)) for start in range(0, count, PIECE)]


@lru_cache(maxsize=None)
def persistent_collectives() -> bool:
    """MPI-4 persistent collectives (``MPI_Allreduce_init``): mpi4py raises
    NotImplementedError where the library lacks them."""
    try:
        MPI.COMM_SELF.Allreduce_init(MPI.IN_PLACE, [bytearray(1), MPI.BYTE], MPI.BOR).Free()
    except NotImplementedError:
        return False
    return True


#: MPI's pair datatypes (value, index) for MAXLOC/MINLOC: always reduced by the MPI itself.
PAIR_TYPES = frozenset(getattr(MPI, name).handle for name in
                       ("FLOAT_INT", "DOUBLE_INT", "LONG_INT", "SHORT_INT", "LONG_DOUBLE_INT", "TWOINT", "INT_INT")
                       if getattr(MPI, name, MPI.DATATYPE_NULL) != MPI.DATATYPE_NULL)
