# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled transport: runs a per-rank plan (see stragglar_mpi/run/plan.py) with raw
MPI calls, the GIL released, and a test-and-yield progress loop.

Local rows run on the host with the typed loops below, or for another memory
(device buffers: stragglar_mpi/memory/device.py) through that backend's table of local
operations, called with the GIL; then the backend's queue is synchronised before
the next round's messages are posted.

Plan rows are int64: (kind, round, peer, buf, offset, count, buf2, offset2).
Offsets are in bytes, counts in elements of the call's datatype.  Counts are
MPI_Count; mpi_compat.h makes the large-count calls work on MPI-3.1 libraries too.
"""
from mpi4py cimport MPI
from mpi4py.libmpi cimport (
    MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Count, MPI_Aint, MPI_Status,
    MPI_SUCCESS, MPI_REQUEST_NULL, MPI_STATUSES_IGNORE, MPI_ERR_IN_STATUS, MPI_ERR_PENDING,
    MPI_Testall, MPI_Test, MPI_Cancel, MPI_Request_free, MPI_STATUS_IGNORE,
    MPI_Type_get_extent, MPI_BYTE, MPI_Wtime, MPI_Get_elements_x,
)
from libc.string cimport memcpy
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport malloc, free
from cpython.object cimport PyObject

cdef extern from "sched.h" nogil:
    int sched_yield()

cdef extern from "mpi_compat.h" nogil:
    enum: SMPI_LARGE_COUNT, SMPI_MPI_VERSION, SMPI_MPI_SUBVERSION
    int smpi_isend(const void *, MPI_Count, MPI_Datatype, int, int, MPI_Comm, MPI_Request *)
    int smpi_irecv(void *, MPI_Count, MPI_Datatype, int, int, MPI_Comm, MPI_Request *)
    int smpi_reduce_local(const void *, void *, MPI_Count, MPI_Datatype, MPI_Op)

from mpi4py import MPI as _MPI

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

cdef enum:
    RECV = 0
    SEND = 1
    REDUCE = 2
    COPY = 3
    TAG_MOD = 32767       # a round's tag: round % TAG_MOD (core/tags.py ROUND_TAGS)


cdef enum:
    TIMED_OUT = -1
    WRONG_SIZE = -2     # a receive completed with another size than the plan's
    LOCAL_FAILED = -3   # the memory backend's local operation raised (kept in its .error)


cdef inline int _complete(MPI_Request *reqs, int n, double deadline,
                          MPI_Status *statuses=NULL) noexcept nogil:
    # Test and yield, never a blocking spin; TIMED_OUT once MPI_Wtime passes deadline (> 0).
    cdef int flag = 0, ierr = MPI_SUCCESS
    while True:
        ierr = MPI_Testall(n, reqs, &flag, statuses if statuses != NULL else MPI_STATUSES_IGNORE)
        if ierr != MPI_SUCCESS or flag:
            return ierr
        if deadline > 0 and MPI_Wtime() > deadline:
            return TIMED_OUT
        sched_yield()


cdef inline void _abandon(MPI_Request *reqs, int n) noexcept nogil:
    # After an error or a timeout: cancel what is still posted, so that no receive
    # writes into a buffer after we return; a request that will not die within
    # half a second (a send to a rank that never came) is freed instead.
    cdef int i, flag
    cdef double until = MPI_Wtime() + 0.5
    for i in range(n):
        if reqs[i] != MPI_REQUEST_NULL:
            MPI_Cancel(&reqs[i])
    for i in range(n):
        flag = 0
        while reqs[i] != MPI_REQUEST_NULL and not flag:
            MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE)
            if not flag and MPI_Wtime() > until:
                MPI_Request_free(&reqs[i])
                break
            sched_yield()


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


cdef struct Posted:
    MPI_Request *reqs
    MPI_Status *statuses
    int *peers
    int64_t *counts   # elements a receive expects; -1 for a send
    int n
    int cap
    double first      # MPI_Wtime when the first round of requests completed, or -1
    double deadline
    int bad           # the request whose status is wrong (after WRONG_SIZE or an error), or -1
    int64_t got       # elements it brought (WRONG_SIZE), or -1
    int64_t round     # the round being completed


cdef inline int _settle(Posted *p, MPI_Datatype dtype) noexcept nogil:
    cdef int ierr
    if p.n == 0:
        return MPI_SUCCESS
    ierr = _complete(p.reqs, p.n, p.deadline, p.statuses)
    if ierr == MPI_ERR_IN_STATUS:
        ierr = _status_error(p)
    elif ierr == MPI_SUCCESS:
        ierr = _check_sizes(p, dtype)
    if ierr == MPI_SUCCESS:
        p.n = 0
        if p.first < 0:
            p.first = MPI_Wtime()
    return ierr


cdef int _status_error(Posted *p) noexcept nogil:
    # MPI_ERR_IN_STATUS: the real error is in the status of the request that failed.
    cdef int i, err
    for i in range(p.n):
        err = p.statuses[i].MPI_ERROR
        if err != MPI_SUCCESS and err != MPI_ERR_PENDING:
            p.bad = i
            return err
    return MPI_ERR_IN_STATUS


cdef int _check_sizes(Posted *p, MPI_Datatype dtype) noexcept nogil:
    # Every receive brought exactly what the plan expects (a short one would leave old data).
    cdef int i
    cdef MPI_Count got = 0
    for i in range(p.n):
        if p.counts[i] < 0:
            continue
        if MPI_Get_elements_x(&p.statuses[i], dtype, &got) != MPI_SUCCESS or got != p.counts[i]:
            p.bad, p.got = i, got
            return WRONG_SIZE
    return MPI_SUCCESS


cdef int _local(PyObject *local, int64_t kind, char *a, char *b, int64_t count,
                MPI_Aint extent) noexcept with gil:
    """A local operation of a memory backend other than the host (see _memory): REDUCE,
    COPY, with kind -1 the synchronisation of what it queued, with kind -2 the start
    of round ``count`` (``rounds.begin``: staged copies, _staged)."""
    backend = <object>local
    try:
        if kind == REDUCE:
            backend.reduce(<uintptr_t>a, <uintptr_t>b, count)
        elif kind == COPY:
            backend.copy(<uintptr_t>a, <uintptr_t>b, count * extent)
        elif kind == -2:
            backend.begin(count)
        else:
            backend.sync()
    except BaseException as exc:
        backend.error = exc
        return LOCAL_FAILED
    return MPI_SUCCESS


cdef int _run(const int64_t[:, ::1] plan, char **bufs, MPI_Comm comm,
              MPI_Datatype dtype, MPI_Op op, MPI_Aint extent, Posted *p, int loop,
              PyObject *local, PyObject *rounds) noexcept nogil:
    # ``local``: NULL for host memory (the loops below), else the backend's table;
    # ``rounds``: NULL, or told when each round starts (after the previous one is complete).
    cdef Py_ssize_t i
    cdef int ierr = MPI_SUCCESS
    cdef int64_t kind, rnd = -1
    cdef bint queued = False     # local work of the backend not yet synchronised
    cdef char *a
    for i in range(plan.shape[0]):
        kind = plan[i, 0]
        a = bufs[plan[i, 3]] + plan[i, 4]
        if plan[i, 1] != rnd or kind == REDUCE or kind == COPY:
            # A round starts, and local work begins, only when this rank's messages are done.
            ierr = _settle(p, dtype)
            if ierr == MPI_SUCCESS and queued and plan[i, 1] != rnd:
                # The round's sends may read, and its receives overwrite, what the queue touches.
                ierr = _local(local, -1, NULL, NULL, 0, extent)
                queued = False
            if ierr == MPI_SUCCESS and rounds != NULL and plan[i, 1] != rnd:
                ierr = _local(rounds, -2, NULL, NULL, plan[i, 1], extent)
            rnd = plan[i, 1]
            if ierr == MPI_SUCCESS:
                p.round = rnd
        if ierr == MPI_SUCCESS and kind == RECV:
            p.peers[p.n] = <int>plan[i, 2]
            p.counts[p.n] = plan[i, 5]
            ierr = smpi_irecv(a, <MPI_Count>plan[i, 5], dtype, <int>plan[i, 2],
                               <int>(rnd % TAG_MOD), comm, &p.reqs[p.n])
            p.n += 1
        elif ierr == MPI_SUCCESS and kind == SEND:
            p.peers[p.n] = <int>plan[i, 2]
            p.counts[p.n] = -1
            ierr = smpi_isend(a, <MPI_Count>plan[i, 5], dtype, <int>plan[i, 2],
                               <int>(rnd % TAG_MOD), comm, &p.reqs[p.n])
            p.n += 1
        elif ierr == MPI_SUCCESS and local != NULL:
            ierr = _local(local, kind, a, bufs[plan[i, 6]] + plan[i, 7], plan[i, 5], extent)
            queued = True
        elif ierr == MPI_SUCCESS and kind == REDUCE:
            ierr = _reduce(a, bufs[plan[i, 6]] + plan[i, 7], plan[i, 5], loop, dtype, op)
        elif ierr == MPI_SUCCESS:
            memcpy(bufs[plan[i, 6]] + plan[i, 7], a, <size_t>(plan[i, 5] * extent))
        if ierr != MPI_SUCCESS:
            return ierr
    ierr = _settle(p, dtype)
    if ierr == MPI_SUCCESS and queued:
        ierr = _local(local, -1, NULL, NULL, 0, extent)
    return ierr


def execute(const int64_t[:, ::1] plan, tuple addresses, MPI.Comm comm,
            MPI.Datatype dtype, MPI.Op op, int maxreq, int loop=0, double deadline=0.0,
            object local=None, object rounds=None):
    """Run ``plan`` on the buffers at ``addresses`` (input, output, scratch).

    ``loop`` selects a typed reduction loop (see ``loop_id``); 0 uses MPI_Reduce_local.
    ``local``: None for host memory, else the memory backend's local operations
    (``reduce(a, b, count)``, ``copy(a, b, nbytes)``, ``sync()``, ``error``; _device.Local).
    ``rounds``: None, or an object whose ``begin(round)`` runs before each round's
    messages are posted (``error`` as for ``local``; _staged.Staging).
    ``deadline``: an MPI_Wtime after which waiting stops; the outstanding
    requests are cancelled and ``Pending(round, peers)`` is raised.
    Returns the MPI_Wtime at which the first receives completed, or None.
    """
    cdef char *bufs[3]
    cdef int k, ierr
    cdef MPI_Aint lb = 0, extent = 0
    cdef Posted p
    for k in range(3):
        bufs[k] = <char *><uintptr_t>addresses[k]
    MPI_Type_get_extent(dtype.ob_mpi, &lb, &extent)
    if plan.shape[0] and maxreq < 1:
        raise ValueError("maxreq must be positive")
    cdef int cap = max(maxreq, 1)
    cdef PyObject *table = NULL if local is None else <PyObject *>local
    cdef PyObject *hook = NULL if rounds is None else <PyObject *>rounds
    p.reqs = <MPI_Request *>malloc(cap * sizeof(MPI_Request))
    p.statuses = <MPI_Status *>malloc(cap * sizeof(MPI_Status))
    p.peers = <int *>malloc(cap * sizeof(int))
    p.counts = <int64_t *>malloc(cap * sizeof(int64_t))
    p.n, p.cap, p.first, p.deadline = 0, maxreq, -1.0, deadline
    p.bad, p.got, p.round = -1, -1, -1
    try:
        if p.reqs == NULL or p.statuses == NULL or p.peers == NULL or p.counts == NULL:
            raise MemoryError()
        with nogil:
            ierr = _run(plan, bufs, comm.ob_mpi, dtype.ob_mpi, op.ob_mpi, extent, &p, loop, table, hook)
            if ierr != MPI_SUCCESS:
                _abandon(p.reqs, p.n)
        if ierr == LOCAL_FAILED:
            _drain(local)
            failed = getattr(rounds, "error", None)
            raise failed if failed is not None else local.error
        if ierr != MPI_SUCCESS:
            _drain(local)
            _raise(&p, ierr, dtype)
    finally:
        free(p.reqs)
        free(p.statuses)
        free(p.peers)
        free(p.counts)
    return p.first if p.first >= 0 else None


cdef _drain(object local):
    """After a failure: nothing the backend queued runs on after the call has raised."""
    if local is not None:
        try:
            local.sync()
        except BaseException:
            pass


cdef _raise(Posted *p, int ierr, MPI.Datatype dtype):
    """The error of a failed run, naming the peer and the sizes where a message is at fault."""
    from ..core.errors import Mismatch, Pending, size_message
    if ierr == TIMED_OUT:
        raise Pending(sorted({p.peers[k] for k in range(p.n)}))
    if p.bad < 0:
        raise _MPI.Exception(ierr)
    peer, want = p.peers[p.bad], p.counts[p.bad]
    if want < 0:   # a send failed: nothing about sizes to say
        raise _MPI.Exception(ierr)
    raise Mismatch(size_message(peer, p.round, want, p.got if ierr == WRONG_SIZE else -1,
                                dtype, None if ierr == WRONG_SIZE else ierr))


def ping(MPI.Comm comm, int peer, int nbytes, int tag=0):
    """Round trip of ``nbytes`` with ``peer`` through the compiled path; returns the bytes received."""
    cdef bytearray out = bytearray(nbytes)
    cdef bytearray data = bytearray((comm.Get_rank() + i) % 256 for i in range(nbytes))
    cdef char *sbuf = data
    cdef char *rbuf = out
    cdef MPI_Request reqs[2]
    cdef int ierr
    with nogil:
        ierr = smpi_irecv(rbuf, nbytes, MPI_BYTE, peer, tag, comm.ob_mpi, &reqs[0])
        if ierr == MPI_SUCCESS:
            ierr = smpi_isend(sbuf, nbytes, MPI_BYTE, peer, tag, comm.ob_mpi, &reqs[1])
        if ierr == MPI_SUCCESS:
            ierr = _complete(reqs, 2, 0.0)
    if ierr != MPI_SUCCESS:
        raise _MPI.Exception(ierr)
    return bytes(out)


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


def built_for():
    """The MPI standard of the mpi.h this extension was compiled against, and whether
    it has the MPI-4 large-count calls (else messages over INT_MAX use derived types)."""
    return {"mpi_version": (SMPI_MPI_VERSION, SMPI_MPI_SUBVERSION), "large_count": bool(SMPI_LARGE_COUNT)}
