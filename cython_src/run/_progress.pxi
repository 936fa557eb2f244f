# The progress thread's loop: the steps of every operation in flight, polled without the GIL.

cdef enum:
    IDLE_NAP_NS = 50000      # 50 us

cdef double IDLE_SPIN_S = 0.01   # serve() naps between passes only after 10 ms without a step

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


cdef void _to_end(void *step, bint machine) noexcept nogil:
    # A step polled to its end in this thread (``run``): test and yield, never a blocking spin.
    while _poll(step, machine) == PENDING:
        sched_yield()


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
