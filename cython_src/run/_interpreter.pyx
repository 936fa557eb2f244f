# cython: language_level=3, boundscheck=False, wraparound=False
"""The interpreter: one resumable machine for every plan, and the progress thread's loop.

A ``Machine`` is one rank's plan (see stragglar_mpi/run/plan.py) in progress: its
``poll`` completes the round's messages if they are in, runs the round's local rows,
posts the next round's messages, and returns without waiting.  Blocking calls poll it
to the end in the caller's thread (``run``: test and yield, the GIL released); the
progress thread (``serve``) polls the machines and waits of every operation in flight
without the GIL.  A ``Waiting`` is the other kind of step: requests that the code
that waited completes afterwards (arrival messages, a native collective), or a time.

Local rows run on the host with the typed loops below, or for another memory
(device buffers: stragglar_mpi/memory/device.py) through that backend's table of local
operations, called with the GIL; then the backend's queue is synchronised before
the next round's messages are posted.

Plan rows are int64, their columns named in run/plan.py (``COLUMNS``).
Offsets are in bytes, counts in elements of the call's datatype.  Counts are
MPI_Count; mpi_compat.h makes the large-count calls work on MPI-3.1 libraries too.
Round r's messages carry tag ``tag0 + r % ROUND_TAGS``: the sequence's tags (core/tags.py).

The parts, included as mpi4py includes its .pxi files: the typed reduction loops
(_reduce.pxi), what a machine has posted (_posted.pxi) and how a failed one gives it up
(_abandon.pxi), the machine (_machine.pxi), the other step (_waits.pxi), the progress
thread's loop (_progress.pxi).
"""
from mpi4py cimport MPI
from mpi4py.libmpi cimport (
    MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Count, MPI_Aint, MPI_Status,
    MPI_SUCCESS, MPI_REQUEST_NULL, MPI_ERR_IN_STATUS, MPI_ERR_PENDING,
    MPI_Testall, MPI_Test, MPI_Cancel, MPI_Request_free, MPI_STATUS_IGNORE,
    MPI_Type_get_extent, MPI_Wtime, MPI_Get_elements_x, MPI_Request_get_status,
    MPI_Iprobe, MPI_ANY_SOURCE,
)
from libc.string cimport memcpy
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport malloc, realloc, free
from cpython.object cimport PyObject

cdef extern from "sched.h" nogil:
    int sched_yield()

cdef extern from "mpi_compat.h" nogil:
    enum: SMPI_LARGE_COUNT, SMPI_MPI_VERSION, SMPI_MPI_SUBVERSION
    int smpi_isend(const void *, MPI_Count, MPI_Datatype, int, int, MPI_Comm, MPI_Request *)
    int smpi_irecv(void *, MPI_Count, MPI_Datatype, int, int, MPI_Comm, MPI_Request *)
    int smpi_reduce_local(const void *, void *, MPI_Count, MPI_Datatype, MPI_Op)

from mpi4py import MPI as _MPI

from ..core.tags import ROUND_TAGS as _ROUND_TAGS
from . import plan as _plan

# Plan rows' kinds and columns (run/plan.py) and the round tags' modulus (core/tags.py),
# read from their one source at import into C globals that the nogil code uses.
cdef int64_t RECV = _plan.RECV, SEND = _plan.SEND, REDUCE = _plan.REDUCE, COPY = _plan.COPY
cdef Py_ssize_t KIND = _plan.KIND, ROUND = _plan.ROUND, PEER = _plan.PEER, BUF = _plan.BUF
cdef Py_ssize_t OFFSET = _plan.OFFSET, COUNT = _plan.COUNT, BUF2 = _plan.BUF2
cdef Py_ssize_t OFFSET2 = _plan.OFFSET2, WIDTH = len(_plan.COLUMNS)
cdef int ROUND_TAGS = _ROUND_TAGS

cdef enum:
    TIMED_OUT = -1
    WRONG_SIZE = -2     # a receive completed with another size than the plan's
    LOCAL_FAILED = -3   # the memory backend's local operation raised (kept in its .error)
    AGAIN = -4          # messages still in flight: poll again

cdef enum:
    # What a step's poll returns (also Machine.poll / Waiting.poll).
    PENDING = 0
    FINISHED = 1
    FAILED = 2          # a Machine failed (result() raises); a Waiting ran out of time
    CLEANING = 3        # a Machine failed and waits for its cancelled requests (polls PENDING)

include "_reduce.pxi"
include "_posted.pxi"
include "_abandon.pxi"
include "_machine.pxi"
include "_waits.pxi"
include "_progress.pxi"
include "_drive.pxi"


def built_for():
    """The MPI standard of the mpi.h this extension was compiled against, and whether
    it has the MPI-4 large-count calls (else messages over INT_MAX use derived types)."""
    return {"mpi_version": (SMPI_MPI_VERSION, SMPI_MPI_SUBVERSION), "large_count": bool(SMPI_LARGE_COUNT)}
