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
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport malloc, free

cdef extern from "sched.h" nogil:
    int sched_yield()

from mpi4py import MPI as _MPI

ctypedef fused num_t:
    float
    double
    int32_t
    int64_t

cdef enum:
    # Typed reduction kernels: id = 16 * dtype + op (0 = use MPI_Reduce_local).
    K_F32 = 1
    K_F64 = 2
    K_I32 = 3
    K_I64 = 4
    K_SUM = 1
    K_PROD = 2
    K_MAX = 3
    K_MIN = 4

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


cdef void _combine(num_t *a, num_t *b, Py_ssize_t n, int op) noexcept nogil:
    # b = a (op) b, elementwise, written as MPICH writes it so results match MPI_Reduce_local.
    cdef Py_ssize_t i
    if op == K_SUM:
        for i in range(n):
            b[i] = a[i] + b[i]
    elif op == K_PROD:
        for i in range(n):
            b[i] = a[i] * b[i]
    elif op == K_MAX:
        for i in range(n):
            b[i] = b[i] if b[i] > a[i] else a[i]
    elif op == K_MIN:
        for i in range(n):
            b[i] = b[i] if b[i] < a[i] else a[i]


cdef int _reduce(char *a, char *b, int64_t n, int kernel, MPI_Datatype dtype, MPI_Op op) noexcept nogil:
    cdef int t = kernel >> 4, o = kernel & 15
    if t == K_F32:
        _combine(<float *>a, <float *>b, n, o)
    elif t == K_F64:
        _combine(<double *>a, <double *>b, n, o)
    elif t == K_I32:
        _combine(<int32_t *>a, <int32_t *>b, n, o)
    elif t == K_I64:
        _combine(<int64_t *>a, <int64_t *>b, n, o)
    else:
        return MPI_Reduce_local_c(a, b, <MPI_Count>n, dtype, op)
    return MPI_SUCCESS


cdef int _run(const int64_t[:, ::1] plan, char **bufs, MPI_Comm comm,
              MPI_Datatype dtype, MPI_Op op, MPI_Aint extent,
              MPI_Request *reqs, int maxreq, double *first, int kernel) except -1 nogil:
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
                ierr = _reduce(a, b, plan[i, 5], kernel, dtype, op)
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
            MPI.Datatype dtype, MPI.Op op, int maxreq, int kernel=0):
    """Run ``plan`` on the buffers at ``addresses`` (input, output, scratch).

    ``kernel`` selects a typed reduction loop (see ``kernel_id``); 0 uses MPI_Reduce_local.

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
            _run(plan, bufs, comm.ob_mpi, dtype.ob_mpi, op.ob_mpi, extent, reqs, maxreq, &first, kernel)
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


def reduce_local(a, b, MPI.Datatype dtype, MPI.Op op, int kernel):
    """b = a (op) b through the executor's reduction path (for tests and benchmarks)."""
    ba, bb = _MPI.buffer(a), _MPI.buffer(b)
    cdef char *pa = <char *><uintptr_t>ba.address
    cdef char *pb = <char *><uintptr_t>bb.address
    cdef MPI_Aint lb = 0, extent = 0
    MPI_Type_get_extent(dtype.ob_mpi, &lb, &extent)
    cdef int64_t n = bb.nbytes // extent
    cdef int ierr
    with nogil:
        ierr = _reduce(pa, pb, n, kernel, dtype.ob_mpi, op.ob_mpi)
    if ierr != MPI_SUCCESS:
        raise _MPI.Exception(ierr)


_KERNEL_TYPES = {"f": K_F32, "d": K_F64}
_KERNEL_OPS = {}


def kernel_id(MPI.Datatype dtype, MPI.Op op):
    """The typed loop for (dtype, op), or 0 when MPI_Reduce_local should do it."""
    if not _KERNEL_OPS:
        _KERNEL_OPS.update({_MPI.SUM.handle: K_SUM, _MPI.PROD.handle: K_PROD,
                            _MPI.MAX.handle: K_MAX, _MPI.MIN.handle: K_MIN})
        for name, k in (("INT32_T", K_I32), ("INT64_T", K_I64), ("FLOAT", K_F32), ("DOUBLE", K_F64)):
            _KERNEL_TYPES[getattr(_MPI, name).handle] = k
    t = _KERNEL_TYPES.get(dtype.handle, 0)
    if t == 0 and dtype.Get_size() in (4, 8):
        code = dtype.tocode() if dtype.is_predefined else ""
        if code in ("i", "l", "q") and dtype.Get_size() == 4:
            t = K_I32
        elif code in ("i", "l", "q") and dtype.Get_size() == 8:
            t = K_I64
    o = _KERNEL_OPS.get(op.handle, 0)
    return 16 * t + o if t and o else 0
