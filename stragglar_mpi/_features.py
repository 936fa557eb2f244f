"""What the MPI library under mpi4py has beyond MPI-3.1, found at run time.

The compiled extension says what it was built for (``_p2p.built_for()``: mpi.h's
MPI_VERSION when it was compiled); this module says what the library running now has.
Open MPI 4.1 and 5, MVAPICH2 and Intel MPI 2021 report MPI 3.1; MPICH 4+ reports 4.x.
"""
from __future__ import annotations

from functools import lru_cache

from mpi4py import MPI


def large_count() -> bool:
    """The MPI-4 large-count calls (``MPI_Isend_c`` ...)."""
    return MPI.Get_version() >= (4, 0)


@lru_cache(maxsize=None)
def persistent_collectives() -> bool:
    """MPI-4 persistent collectives (``MPI_Allreduce_init``): mpi4py raises
    NotImplementedError where the library lacks them."""
    try:
        MPI.COMM_SELF.Allreduce_init(MPI.IN_PLACE, [bytearray(1), MPI.BYTE], MPI.BOR).Free()
    except NotImplementedError:
        return False
    return True
