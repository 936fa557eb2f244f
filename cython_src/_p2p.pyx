# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled transport: runs a per-rank plan (see stragglar_mpi/_plan.py) with raw
MPI calls, the GIL released, and a test-and-yield progress loop.

Plan rows are int64: (kind, round, peer, buf, offset, count, buf2, offset2).
Offsets are in bytes, counts in elements of the call's datatype.
"""
from mpi4py cimport MPI
from mpi4py.libmpi cimport (
    MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Count, MPI_Aint,
    MPI_SUCCESS, MPI_REQUEST_NULL, MPI_STATUSES_IGNORE,
    MPI_Isend_c, MPI_Irecv_c, MPI_Testall, MPI_Cancel, MPI_Wait, MPI_STATUS_IGNORE,
    MPI_Reduce_local_c, MPI_Type_get_extent, MPI_BYTE, MPI_Wtime,
)
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport malloc, free

cdef extern from "sched.h" nogil:
    int sched_yield()

from mpi4py import MPI as _MPI

cdef enum:
    RECV = 0
    SEND = 1
    REDUCE = 2
    COPY = 3
    TAG_MOD = 32768


cdef inline int _complete(MPI_Request *reqs, int n) noexcept nogil:
    cdef int flag = 0, ierr = MPI_SUCCESS
    while True:
        ierr = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE)
        if ierr != MPI_SUCCESS or flag:
            return ierr
        sched_yield()


cdef inline void _abandon(MPI_Request *reqs, int n) noexcept nogil:
    # After an error: cancel what is still posted so no buffer is written later.
    cdef int i
    for i in range(n):
        if reqs[i] != MPI_REQUEST_NULL:
            MPI_Cancel(&reqs[i])
            MPI_Wait(&reqs[i], MPI_STATUS_IGNORE)


cdef int _run(const int64_t[:, ::1] plan, char **bufs, MPI_Comm comm,
              MPI_Datatype dtype, MPI_Op op, MPI_Aint extent,
              MPI_Request *reqs, int maxreq, double *first) except -1 nogil:
    cdef Py_ssize_t i
    cdef int nreq = 0, ierr = MPI_SUCCESS
    cdef int64_t kind, rnd = -1
    cdef char *a
    cdef char *b
    for i in range(plan.shape[0]):
        kind = plan[i, 0]
        a = bufs[plan[i, 3]] + plan[i, 4]
        if plan[i, 1] != rnd:
            # A round starts only when this rank's part of the previous one is done.
            rnd = plan[i, 1]
            if nreq:
                ierr = _complete(reqs, nreq)
                if ierr != MPI_SUCCESS:
                    break
                nreq = 0
                if first[0] < 0:
                    first[0] = MPI_Wtime()
        if kind == RECV or kind == SEND:
            if nreq == maxreq:
                with gil:
                    raise RuntimeError("plan posts more requests than announced")
            if kind == RECV:
                ierr = MPI_Irecv_c(a, <MPI_Count>plan[i, 5], dtype, <int>plan[i, 2],
                                   <int>(plan[i, 1] % TAG_MOD), comm, &reqs[nreq])
            else:
                ierr = MPI_Isend_c(a, <MPI_Count>plan[i, 5], dtype, <int>plan[i, 2],
                                   <int>(plan[i, 1] % TAG_MOD), comm, &reqs[nreq])
            nreq += 1
        else:
            if nreq:
                ierr = _complete(reqs, nreq)
                if ierr != MPI_SUCCESS:
                    break
                nreq = 0
                if first[0] < 0:
                    first[0] = MPI_Wtime()
            b = bufs[plan[i, 6]] + plan[i, 7]
            if kind == REDUCE:
                ierr = MPI_Reduce_local_c(a, b, <MPI_Count>plan[i, 5], dtype, op)
            else:
                memcpy(b, a, <size_t>(plan[i, 5] * extent))
        if ierr != MPI_SUCCESS:
            break
    if ierr == MPI_SUCCESS and nreq:
        ierr = _complete(reqs, nreq)
        nreq = 0
        if ierr == MPI_SUCCESS and first[0] < 0:
            first[0] = MPI_Wtime()
    if ierr != MPI_SUCCESS:
        _abandon(reqs, nreq)
        with gil:
            raise _MPI.Exception(ierr)
    return 0


def execute(const int64_t[:, ::1] plan, tuple addresses, MPI.Comm comm,
            MPI.Datatype dtype, MPI.Op op, int maxreq):
    """Run ``plan`` on the buffers at ``addresses`` (input, output, scratch).

    Returns the MPI_Wtime at which the first receives completed, or None.
    """
    cdef char *bufs[3]
    cdef double first = -1.0
    cdef int k
    cdef MPI_Aint lb = 0, extent = 0
    for k in range(3):
        bufs[k] = <char *><uintptr_t>addresses[k]
    MPI_Type_get_extent(dtype.ob_mpi, &lb, &extent)
    cdef MPI_Request *reqs = <MPI_Request *>malloc(max(maxreq, 1) * sizeof(MPI_Request))
    if reqs == NULL:
        raise MemoryError()
    try:
        for k in range(maxreq):
            reqs[k] = MPI_REQUEST_NULL
        with nogil:
            _run(plan, bufs, comm.ob_mpi, dtype.ob_mpi, op.ob_mpi, extent, reqs, maxreq, &first)
    finally:
        free(reqs)
    return first if first >= 0 else None


def ping(MPI.Comm comm, int peer, int nbytes, int tag=0):
    """Round trip of ``nbytes`` with ``peer`` through the compiled path; returns the bytes received."""
    cdef bytearray out = bytearray(nbytes)
    cdef bytearray data = bytearray((comm.Get_rank() + i) % 256 for i in range(nbytes))
    cdef char *sbuf = data
    cdef char *rbuf = out
    cdef MPI_Request reqs[2]
    cdef int ierr
    with nogil:
        ierr = MPI_Irecv_c(rbuf, nbytes, MPI_BYTE, peer, tag, comm.ob_mpi, &reqs[0])
        if ierr == MPI_SUCCESS:
            ierr = MPI_Isend_c(sbuf, nbytes, MPI_BYTE, peer, tag, comm.ob_mpi, &reqs[1])
        if ierr == MPI_SUCCESS:
            ierr = _complete(reqs, 2)
    if ierr != MPI_SUCCESS:
        raise _MPI.Exception(ierr)
    return bytes(out)
