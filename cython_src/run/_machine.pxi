# The plan machine: one rank's plan, resumable, polled without the GIL.

cdef int _local(PyObject *local, int64_t kind, char *a, char *b, int64_t count,
                MPI_Aint extent) noexcept with gil:
    """A local operation of a memory backend other than the host (see _memory): REDUCE,
    COPY, with kind -1 the synchronisation of what it queued; or of the plan's round hook
    (run/staged.py, bench/rounds.py): with kind -2 the start of round ``count``
    (``rounds.begin``), with kind -3 its end (``rounds.end``)."""
    backend = <object>local
    try:
        if kind == REDUCE:
            backend.reduce(<uintptr_t>a, <uintptr_t>b, count)
        elif kind == COPY:
            backend.copy(<uintptr_t>a, <uintptr_t>b, count * extent)
        elif kind == -2:
            backend.begin(count)
        elif kind == -3:
            backend.end(count)
        else:
            backend.sync()
    except BaseException as exc:
        backend.error = exc
        return LOCAL_FAILED
    return MPI_SUCCESS


cdef struct Run:
    # One rank's plan in progress: what ``_advance`` needs, without the GIL.
    const int64_t *rows       # (nrows, WIDTH), C order
    Py_ssize_t nrows
    Py_ssize_t row            # the next row to do
    char *bufs[3]
    MPI_Comm comm
    MPI_Datatype dtype
    MPI_Op op
    MPI_Aint extent
    int loop
    PyObject *local           # NULL: host loops; else the backend's table (called with the GIL)
    PyObject *rounds          # NULL, or told when each round starts and ends
    int tag0                  # round r sends with tag tag0 + r % ROUND_TAGS
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
    cdef const int64_t *row = m.rows + WIDTH * i
    cdef int64_t kind = row[KIND], rnd = row[ROUND]
    cdef char *a = m.bufs[row[BUF]] + row[OFFSET]
    cdef int ierr = MPI_SUCCESS
    if rnd != m.rnd or kind == REDUCE or kind == COPY:
        ierr = _settle(&m.p, m.dtype)
        if ierr != MPI_SUCCESS:
            return ierr
        if m.queued and rnd != m.rnd:
            # The round's sends may read, and its receives overwrite, what the queue touches.
            ierr = _local(m.local, -1, NULL, NULL, 0, m.extent)
            m.queued = False
        if ierr == MPI_SUCCESS and rnd != m.rnd:
            ierr = _hook(m, rnd)
        if ierr != MPI_SUCCESS:
            return ierr
        m.rnd = rnd
        m.p.round = rnd
    if kind == RECV or kind == SEND:
        m.p.peers[m.p.n] = <int>row[PEER]
        m.p.counts[m.p.n] = row[COUNT] if kind == RECV else -1
        m.p.reqs[m.p.n] = MPI_REQUEST_NULL
        if kind == RECV:
            ierr = smpi_irecv(a, <MPI_Count>row[COUNT], m.dtype, <int>row[PEER],
                              m.tag0 + <int>(rnd % ROUND_TAGS), m.comm, &m.p.reqs[m.p.n])
        else:
            ierr = smpi_isend(a, <MPI_Count>row[COUNT], m.dtype, <int>row[PEER],
                              m.tag0 + <int>(rnd % ROUND_TAGS), m.comm, &m.p.reqs[m.p.n])
        if ierr == MPI_SUCCESS:
            m.p.n += 1            # a slot only for a request that was made
    elif m.local != NULL:
        ierr = _local(m.local, kind, a, m.bufs[row[BUF2]] + row[OFFSET2], row[COUNT], m.extent)
        m.queued = True
    elif kind == REDUCE:
        ierr = _reduce(a, m.bufs[row[BUF2]] + row[OFFSET2], row[COUNT], m.loop, m.dtype, m.op)
    else:
        memcpy(m.bufs[row[BUF2]] + row[OFFSET2], a, <size_t>(row[COUNT] * m.extent))
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
    if ierr == MPI_SUCCESS:
        ierr = _hook(m, -1)
    return ierr


cdef int _hook(Run *m, int64_t rnd) noexcept nogil:
    """The round hook told that the round started last has ended (its messages complete,
    its local work synchronised) and that round ``rnd`` starts (-1: the plan ends)."""
    cdef int ierr = MPI_SUCCESS
    if m.rounds == NULL:
        return ierr
    if m.rnd >= 0:
        ierr = _local(m.rounds, -3, NULL, NULL, m.rnd, m.extent)
    if ierr == MPI_SUCCESS and rnd >= 0:
        ierr = _local(m.rounds, -2, NULL, NULL, rnd, m.extent)
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
                  object local=None, object rounds=None, int tag0=0):
        cdef int k
        cdef MPI_Aint lb = 0
        cdef int cap = max(maxreq, 1)
        if rows.shape[0] and maxreq < 1:
            raise ValueError("maxreq must be positive")
        if rows.shape[0] and rows.shape[1] != WIDTH:
            raise ValueError(f"plan rows have {WIDTH} columns")
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
        self.m.tag0 = tag0
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
            _to_end(&self.m, True)
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


def machine(plan, tuple addresses, MPI.Comm comm, MPI.Datatype datatype, MPI.Op op,
            double deadline=0.0, local=None, rounds=None, int tag0=0):
    """The ``Machine`` that runs ``plan`` (run/plan.py ``Plan``), or None for a plan without
    rows; its outcome is the MPI_Wtime at which its first receive completed (or None).

    Past ``deadline`` (an MPI_Wtime; 0 = never) the outstanding requests are cancelled and
    it raises ``Pending(peers)``.  ``local``: a memory backend's local operations (None:
    host memory, the typed loops).  ``rounds``: None, or told ``begin(round)`` before each
    round's messages are posted and ``end(round)`` once they are complete and its local
    work done (run/staged.py, bench/rounds.py).  Round r's messages carry tag
    ``tag0 + r % ROUND_TAGS`` (the sequence's tags, core/tags.py)."""
    rows = plan.rows
    if rows.shape[0] == 0:
        return None
    return Machine(rows, addresses, comm, datatype, op, plan.max_requests, loop_id(datatype, op),
                   deadline, local, rounds, tag0)
