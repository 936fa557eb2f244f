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

Plan rows are int64: (kind, round, peer, buf, offset, count, buf2, offset2).
Offsets are in bytes, counts in elements of the call's datatype.  Counts are
MPI_Count; mpi_compat.h makes the large-count calls work on MPI-3.1 libraries too.
Round r's messages carry tag ``tag0 + r % tags``: an operation's tags (core/tags.py).
"""
from mpi4py cimport MPI
from mpi4py.libmpi cimport (
    MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Count, MPI_Aint, MPI_Status,
    MPI_SUCCESS, MPI_REQUEST_NULL, MPI_STATUSES_IGNORE, MPI_ERR_IN_STATUS, MPI_ERR_PENDING,
    MPI_Testall, MPI_Test, MPI_Cancel, MPI_Request_free, MPI_STATUS_IGNORE,
    MPI_Type_get_extent, MPI_BYTE, MPI_Wtime, MPI_Get_elements_x, MPI_Request_get_status,
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
    TAG_MOD = 32767       # tags of a plan by default: round % TAG_MOD (core/tags.py)


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

cdef enum:
    IDLE_NAP_NS = 50000      # 50 us

cdef double IDLE_SPIN_S = 0.01   # serve() naps between passes only after 10 ms without a step



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
    int bad           # the request whose status is wrong (after WRONG_SIZE or an error), or -1
    int64_t got       # elements it brought (WRONG_SIZE), or -1
    int64_t round     # the round being completed


cdef double CLEANUP_S = 0.5     # how long a failed machine waits for its cancelled requests


cdef inline void _cancel(Posted *p) noexcept nogil:
    # After an error or a timeout: cancel the receives still posted, so that none writes
    # into a buffer after the machine has failed (``_reap`` waits for them).  Sends are
    # not cancelled (MPI-4 deprecates it; MPICH's UCX device crashed in MPI_Cancel of a
    # send to a rank that never came): ``_reap`` frees one that does not complete.
    # What has completed (an error completes a request too) is done first.
    cdef int i, flag
    for i in range(p.n):
        if p.reqs[i] == MPI_REQUEST_NULL:
            continue
        flag = 0
        if MPI_Test(&p.reqs[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS or flag:
            continue
        if p.counts[i] >= 0:
            MPI_Cancel(&p.reqs[i])


cdef inline bint _reap(MPI_Request *reqs, int n, double until) noexcept nogil:
    # One test of each cancelled request; True once none is left.  Past ``until`` one
    # that will not die (a send to a rank that never came) is freed instead.  It never
    # waits: the progress thread polls a failing machine with the others, so one
    # operation's cleanup stalls nobody else's.
    cdef int i, flag
    cdef bint left = False
    for i in range(n):
        if reqs[i] == MPI_REQUEST_NULL:
            continue
        flag = 0
        MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE)
        if not flag and MPI_Wtime() > until:
            MPI_Request_free(&reqs[i])
        elif not flag:
            left = True
    return not left


cdef inline int _settle(Posted *p, MPI_Datatype dtype) noexcept nogil:
    """One test of what is posted: MPI_SUCCESS once all of it is complete (and right),
    AGAIN while some is still in flight, else the error."""
    cdef int ierr, flag = 0
    if p.n == 0:
        return MPI_SUCCESS
    ierr = MPI_Testall(p.n, p.reqs, &flag, p.statuses)
    if ierr == MPI_SUCCESS and not flag:
        return AGAIN
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


cdef struct Run:
    # One rank's plan in progress: what ``_advance`` needs, without the GIL.
    const int64_t *rows       # (nrows, 8), C order
    Py_ssize_t nrows
    Py_ssize_t row            # the next row to do
    char *bufs[3]
    MPI_Comm comm
    MPI_Datatype dtype
    MPI_Op op
    MPI_Aint extent
    int loop
    PyObject *local           # NULL: host loops; else the backend's table (called with the GIL)
    PyObject *rounds          # NULL, or told when each round starts
    int tag0                  # round r sends with tag tag0 + r % tags
    int tags
    int64_t rnd               # the round started last (-1: none)
    bint queued               # local work of the backend not yet synchronised
    double deadline
    int status                # PENDING, FINISHED, FAILED, CLEANING
    int ierr                  # why it FAILED
    double cleanup            # MPI_Wtime until which CLEANING waits for its cancelled requests
    Posted p


cdef int _row(Run *m, Py_ssize_t i) noexcept nogil:
    """Row ``i``: a round starts, and local work begins, only once this rank's messages
    are complete (AGAIN until then, nothing of the row done)."""
    cdef const int64_t *row = m.rows + 8 * i
    cdef int64_t kind = row[0], rnd = row[1]
    cdef char *a = m.bufs[row[3]] + row[4]
    cdef int ierr = MPI_SUCCESS
    if rnd != m.rnd or kind == REDUCE or kind == COPY:
        ierr = _settle(&m.p, m.dtype)
        if ierr != MPI_SUCCESS:
            return ierr
        if m.queued and rnd != m.rnd:
            # The round's sends may read, and its receives overwrite, what the queue touches.
            ierr = _local(m.local, -1, NULL, NULL, 0, m.extent)
            m.queued = False
        if ierr == MPI_SUCCESS and m.rounds != NULL and rnd != m.rnd:
            ierr = _local(m.rounds, -2, NULL, NULL, rnd, m.extent)
        if ierr != MPI_SUCCESS:
            return ierr
        m.rnd = rnd
        m.p.round = rnd
    if kind == RECV or kind == SEND:
        m.p.peers[m.p.n] = <int>row[2]
        m.p.counts[m.p.n] = row[5] if kind == RECV else -1
        m.p.reqs[m.p.n] = MPI_REQUEST_NULL
        if kind == RECV:
            ierr = smpi_irecv(a, <MPI_Count>row[5], m.dtype, <int>row[2],
                              m.tag0 + <int>(rnd % m.tags), m.comm, &m.p.reqs[m.p.n])
        else:
            ierr = smpi_isend(a, <MPI_Count>row[5], m.dtype, <int>row[2],
                              m.tag0 + <int>(rnd % m.tags), m.comm, &m.p.reqs[m.p.n])
        if ierr == MPI_SUCCESS:
            m.p.n += 1            # a slot only for a request that was made
    elif m.local != NULL:
        ierr = _local(m.local, kind, a, m.bufs[row[6]] + row[7], row[5], m.extent)
        m.queued = True
    elif kind == REDUCE:
        ierr = _reduce(a, m.bufs[row[6]] + row[7], row[5], m.loop, m.dtype, m.op)
    else:
        memcpy(m.bufs[row[6]] + row[7], a, <size_t>(row[5] * m.extent))
    return ierr


cdef int _advance(Run *m) noexcept nogil:
    """Everything of the plan that can be done now: MPI_SUCCESS at its end, AGAIN while
    messages are in flight, else the error."""
    cdef int ierr
    while m.row < m.nrows:
        ierr = _row(m, m.row)
        if ierr != MPI_SUCCESS:
            return ierr
        m.row += 1
    ierr = _settle(&m.p, m.dtype)
    if ierr == MPI_SUCCESS and m.queued:
        ierr = _local(m.local, -1, NULL, NULL, 0, m.extent)
        m.queued = False
    return ierr


cdef int _poll_run(Run *m) noexcept nogil:
    """One step of the machine (see Machine.poll)."""
    cdef int ierr
    if m.status == CLEANING:
        if not _reap(m.p.reqs, m.p.n, m.cleanup):
            return PENDING
        m.status = FAILED
    if m.status != PENDING:
        return m.status
    ierr = _advance(m)
    if ierr == AGAIN:
        if m.deadline > 0 and MPI_Wtime() > m.deadline:
            ierr = TIMED_OUT
        else:
            return PENDING
    if ierr == MPI_SUCCESS:
        m.status = FINISHED
    else:
        _cancel(&m.p)
        m.ierr, m.cleanup = ierr, MPI_Wtime() + CLEANUP_S
        if not _reap(m.p.reqs, m.p.n, m.cleanup):
            m.status = CLEANING
            return PENDING
        m.status = FAILED
    return m.status


cdef class Machine:
    """One rank's plan as a resumable state machine: ``poll`` does what can be done now
    (completes the round's messages if they are in, runs its local rows, posts the next
    round's) and returns; ``run`` polls it to the end in this thread.  The interpreter
    knows nothing of the algorithm: plan rows, buffers, a communicator, tags."""
    cdef Run m
    cdef object _keep          # the plan, the communicator, datatype, op, backends: alive while it runs

    def __cinit__(self, const int64_t[:, ::1] rows, tuple addresses, MPI.Comm comm,
                  MPI.Datatype dtype, MPI.Op op, int maxreq, int loop=0, double deadline=0.0,
                  object local=None, object rounds=None, int tag0=0, int tags=TAG_MOD):
        cdef int k
        cdef MPI_Aint lb = 0
        cdef int cap = max(maxreq, 1)
        if rows.shape[0] and maxreq < 1:
            raise ValueError("maxreq must be positive")
        if rows.shape[0] and rows.shape[1] != 8:
            raise ValueError("plan rows have 8 columns")
        if tags < 1:
            raise ValueError("tags must be positive")
        self._keep = (rows, comm, dtype, op, local, rounds)
        self.m.rows = &rows[0, 0] if rows.shape[0] else NULL
        self.m.nrows, self.m.row = rows.shape[0], 0
        for k in range(3):
            self.m.bufs[k] = <char *><uintptr_t>addresses[k]
        self.m.comm, self.m.dtype, self.m.op = comm.ob_mpi, dtype.ob_mpi, op.ob_mpi
        MPI_Type_get_extent(dtype.ob_mpi, &lb, &self.m.extent)
        self.m.loop, self.m.deadline = loop, deadline
        self.m.local = NULL if local is None else <PyObject *>local
        self.m.rounds = NULL if rounds is None else <PyObject *>rounds
        self.m.tag0, self.m.tags = tag0, tags
        self.m.rnd, self.m.queued = -1, False
        self.m.status, self.m.ierr, self.m.cleanup = PENDING, MPI_SUCCESS, 0.0
        self.m.p.reqs = <MPI_Request *>malloc(cap * sizeof(MPI_Request))
        self.m.p.statuses = <MPI_Status *>malloc(cap * sizeof(MPI_Status))
        self.m.p.peers = <int *>malloc(cap * sizeof(int))
        self.m.p.counts = <int64_t *>malloc(cap * sizeof(int64_t))
        self.m.p.n, self.m.p.cap, self.m.p.first = 0, cap, -1.0
        self.m.p.bad, self.m.p.got, self.m.p.round = -1, -1, -1
        if (self.m.p.reqs == NULL or self.m.p.statuses == NULL or self.m.p.peers == NULL
                or self.m.p.counts == NULL):
            raise MemoryError()

    def __dealloc__(self):
        free(self.m.p.reqs)
        free(self.m.p.statuses)
        free(self.m.p.peers)
        free(self.m.p.counts)

    def poll(self):
        """PENDING (0) while messages are in flight, FINISHED (1), FAILED (2); past the
        deadline the outstanding requests are cancelled and it FAILED."""
        cdef int code
        with nogil:
            code = _poll_run(&self.m)
        return code

    def run(self):
        """Poll to the end in this thread, testing and yielding (never a blocking spin);
        returns what ``result`` returns."""
        with nogil:
            while _poll_run(&self.m) == PENDING:
                sched_yield()
        return self.result()

    def result(self):
        """The MPI_Wtime at which the first messages completed (or None) once FINISHED;
        raises the failure once FAILED: ``Pending(peers)`` past the deadline, ``Mismatch``
        for a message of the wrong size, the backend's error, else ``MPI.Exception``."""
        if self.m.status == PENDING or self.m.status == CLEANING:
            raise RuntimeError("stragglar_mpi: the plan has not finished")
        if self.m.status == FAILED:
            self._raise()
        return self.m.p.first if self.m.p.first >= 0 else None

    cdef _raise(self):
        local, rounds = self._keep[4], self._keep[5]
        if self.m.ierr == LOCAL_FAILED or local is not None:
            _drain(local)
        if self.m.ierr == LOCAL_FAILED:
            failed = getattr(rounds, "error", None)
            raise failed if failed is not None else local.error
        _raise(&self.m.p, self.m.ierr, self._keep[2])


def execute(const int64_t[:, ::1] plan, tuple addresses, MPI.Comm comm,
            MPI.Datatype dtype, MPI.Op op, int maxreq, int loop=0, double deadline=0.0,
            object local=None, object rounds=None, int tag0=0, int tags=TAG_MOD):
    """Run ``plan`` to the end in this thread (``Machine(...).run()``); see Machine."""
    return Machine(plan, addresses, comm, dtype, op, maxreq, loop, deadline, local, rounds,
                   tag0, tags).run()


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


cdef struct Watch:
    # A wait for requests that someone else completes afterwards (MPI_Request_get_status
    # tests without freeing them): the arrival messages, a native collective, a timer;
    # or for a message to be there (MPI_Iprobe from any rank with ``tag`` on ``comm``).
    MPI_Request *reqs
    int n
    int need          # how many must have completed: n (all) or 1 (any)
    double until      # MPI_Wtime after which the wait is over unmet (0: never)
    bint probe
    MPI_Comm comm
    int tag
    int status


cdef int _poll_watch(Watch *w) noexcept nogil:
    cdef int i, flag = 0, done = 0
    if w.status != PENDING:
        return w.status
    if w.probe:
        if MPI_Iprobe(MPI_ANY_SOURCE, w.tag, w.comm, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS or flag:
            w.status = FINISHED
            return FINISHED
    for i in range(w.n):
        flag = 0
        if MPI_Request_get_status(w.reqs[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS or flag:
            done += 1       # an error completes it too: whoever completes it sees the error
            if done >= w.need:
                w.status = FINISHED
                return FINISHED
    if w.until > 0 and MPI_Wtime() > w.until:
        w.status = FAILED
    return w.status


cdef class Waiting:
    """A wait for mpi4py requests (all of them, or any one), for a message to probe
    (``probe``: (communicator, tag)) or a time, polled without the GIL; it completes
    nothing: the code that waited then completes them (Test, Wait, Mrecv)."""
    cdef Watch w
    cdef object _keep

    def __cinit__(self, requests, double until=0.0, bint any=False, probe=None):
        cdef int i
        reqs = list(requests)
        self._keep = (reqs, probe)
        self.w.n = len(reqs)
        self.w.need = 1 if (any and self.w.n) else self.w.n
        self.w.until, self.w.status = until, PENDING
        self.w.probe = probe is not None
        if probe is not None:
            self.w.comm, self.w.tag = (<MPI.Comm?>probe[0]).ob_mpi, probe[1]
        self.w.reqs = <MPI_Request *>malloc(max(self.w.n, 1) * sizeof(MPI_Request))
        if self.w.reqs == NULL:
            raise MemoryError()
        for i in range(self.w.n):
            self.w.reqs[i] = (<MPI.Request?>reqs[i]).ob_mpi
        if self.w.n == 0 and until <= 0 and probe is None:
            self.w.status = FINISHED          # nothing to wait for

    def __dealloc__(self):
        free(self.w.reqs)

    def poll(self):
        cdef int code
        with nogil:
            code = _poll_watch(&self.w)
        return code

    def run(self):
        """Poll to the end in this thread (test and yield); returns ``result()``."""
        with nogil:
            while _poll_watch(&self.w) == PENDING:
                sched_yield()
        return self.result()

    def result(self):
        """True when the requests completed, False when the time ran out first."""
        return self.w.status == FINISHED


# --- the progress thread ------------------------------------------------------------------

cdef int _woken = 0       # set by wake(): the engine has new work for serve()

cdef extern from *:
    """
    static int smpi_load(int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static void smpi_store(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    """
    int smpi_load(int *p) nogil
    void smpi_store(int *p, int v) nogil

cdef extern from "time.h" nogil:
    struct timespec:
        long tv_sec
        long tv_nsec
    int nanosleep(const timespec *, timespec *)


def wake():
    """New work for the progress thread: ``serve`` leaves its polling loop and asks again."""
    smpi_store(&_woken, 1)


cdef inline int _poll(void *step, bint machine) noexcept nogil:
    return _poll_run(<Run *>step) if machine else _poll_watch(<Watch *>step)


cdef void _rest(double quiet) noexcept nogil:
    # Nothing was ready: give the core away.  After IDLE_SPIN_S without a plan row done
    # (an operation that waits for a late rank) sleep a little each time, so that a
    # waiting thread does not take a core from the caller's compute on a full node.  A
    # plan that moves resets the clock: an MPI may copy a large message only while it
    # is polled, so naps between the polls of a running plan would slow its transfers.
    cdef timespec nap
    if quiet < IDLE_SPIN_S:
        sched_yield()
    else:
        nap.tv_sec, nap.tv_nsec = 0, IDLE_NAP_NS
        nanosleep(&nap, NULL)


def serve(engine):
    """The progress thread's loop.  ``engine.runnable()`` returns the operations to
    advance (each with a ``step``: a Machine or a Waiting), blocking while there are
    none, or None to stop; ``engine.resume(done)`` takes the ones whose step is over.
    The steps are polled here without the GIL; it is taken only to resume operations."""
    cdef Py_ssize_t n, k, cap = 0
    cdef void **steps = NULL
    cdef int *machine = NULL
    cdef int *codes = NULL
    cdef bint hit
    cdef Py_ssize_t moved, rows
    cdef double since
    try:
        while True:
            smpi_store(&_woken, 0)        # a wake from here on is seen by the loop below
            ops = engine.runnable()
            if ops is None:
                return
            n = len(ops)
            if n == 0:
                continue
            if n > cap:
                cap = 2 * n
                steps = <void **>realloc(steps, cap * sizeof(void *))
                machine = <int *>realloc(machine, cap * sizeof(int))
                codes = <int *>realloc(codes, cap * sizeof(int))
                if steps == NULL or machine == NULL or codes == NULL:
                    raise MemoryError()
            for k in range(n):
                step = ops[k].step
                if isinstance(step, Machine):
                    steps[k], machine[k] = <void *>&(<Machine>step).m, 1
                else:
                    steps[k], machine[k] = <void *>&(<Waiting?>step).w, 0
            with nogil:
                since, moved = MPI_Wtime(), -1
                while True:
                    hit, rows = False, 0
                    for k in range(n):
                        codes[k] = _poll(steps[k], machine[k])
                        hit = hit or codes[k] != PENDING
                        if machine[k]:
                            rows += (<Run *>steps[k]).row
                    if hit or smpi_load(&_woken):
                        break
                    if rows != moved:
                        since, moved = MPI_Wtime(), rows
                    _rest(MPI_Wtime() - since)
            engine.resume([ops[k] for k in range(n) if codes[k] != PENDING])
    finally:
        free(steps)
        free(machine)
        free(codes)


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
