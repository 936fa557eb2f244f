# The other step: requests that the code that waited completes, a message to probe, a time.

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
    """A wait for mpi4py requests (all of them, or ``need`` of them), for a message to probe
    (``probe``: (communicator, tag)) or a time, polled without the GIL; it completes
    nothing: the code that waited then completes them (Test, Wait, Mrecv)."""
    cdef Watch w
    cdef object _keep

    def __cinit__(self, requests, double until=0.0, need=None, probe=None):
        cdef int i
        reqs = list(requests)
        self._keep = (reqs, probe)
        self.w.n = len(reqs)
        self.w.need = self.w.n if need is None else max(min(<int>need, self.w.n), 1 if self.w.n else 0)
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
            _to_end(&self.w, False)
        return self.result()

    def result(self):
        """True when the requests completed, False when the time ran out first."""
        return self.w.status == FINISHED
