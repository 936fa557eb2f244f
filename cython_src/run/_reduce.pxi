# The typed reduction loops of REDUCE rows on the host (else MPI_Reduce_local).

ctypedef fused num_t:
    float
    double
    int32_t
    int64_t

cdef enum:
    # Typed reduction loops: id = 16 * dtype + op (0 = use MPI_Reduce_local).
    K_F32 = 1
    K_F64 = 2
    K_I32 = 3
    K_I64 = 4
    K_SUM = 1
    K_PROD = 2
    K_MAX = 3
    K_MIN = 4

cdef void _combine(num_t *a, num_t *b, Py_ssize_t n, int op) noexcept nogil:
    # b = a (op) b, elementwise, written as MPICH writes it so results match MPI_Reduce_local
    # (bit for bit in MPICH; Open MPI's MAX/MIN of NaN and signed zeros differ, as MPI allows).
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


cdef int _reduce(char *a, char *b, int64_t n, int loop, MPI_Datatype dtype, MPI_Op op) noexcept nogil:
    cdef int t = loop >> 4, o = loop & 15
    if t == K_F32:
        _combine(<float *>a, <float *>b, n, o)
    elif t == K_F64:
        _combine(<double *>a, <double *>b, n, o)
    elif t == K_I32:
        _combine(<int32_t *>a, <int32_t *>b, n, o)
    elif t == K_I64:
        _combine(<int64_t *>a, <int64_t *>b, n, o)
    else:
        return smpi_reduce_local(a, b, <MPI_Count>n, dtype, op)
    return MPI_SUCCESS


def reduce_local(a, b, MPI.Datatype dtype, MPI.Op op, int loop):
    """b = a (op) b through the executor's reduction path (for tests and benchmarks)."""
    ba, bb = _MPI.buffer(a), _MPI.buffer(b)
    cdef char *pa = <char *><uintptr_t>ba.address
    cdef char *pb = <char *><uintptr_t>bb.address
    cdef MPI_Aint lb = 0, extent = 0
    MPI_Type_get_extent(dtype.ob_mpi, &lb, &extent)
    cdef int64_t n = bb.nbytes // extent
    cdef int ierr
    with nogil:
        ierr = _reduce(pa, pb, n, loop, dtype.ob_mpi, op.ob_mpi)
    if ierr != MPI_SUCCESS:
        raise _MPI.Exception(ierr)


_KERNEL_TYPES = {"f": K_F32, "d": K_F64}
_KERNEL_OPS = {}


def loop_id(MPI.Datatype dtype, MPI.Op op):
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
