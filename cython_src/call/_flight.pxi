# The flight recorder's records, written in C (call/flight.py owns the ring and reads it),
# and the poll of a native call under STRAGGLAR_TIMEOUT.

from posix.time cimport nanosleep, timespec

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef packed struct Rec:
    # call/flight.py RECORD, field for field
    long long serial, seq, count
    double arrived, phase1_end, first_message, exited
    int comm, rank, op, dtype, algorithm, straggler, phase, flags

cdef object _RING_ARRAY = _flight.RING       # kept alive here: _RING points into it
cdef Rec *_RING = <Rec *><size_t>_RING_ARRAY.ctypes.data
cdef long long[::1] _OPENED = _flight.OPENED
cdef long long _CAPACITY = _flight.CAPACITY
cdef int _ENTERED = _flight.ENTERED, _RUNNING = _flight.RUNNING
cdef int _DONE = _flight.DONE, _FAILED = _flight.FAILED
assert sizeof(Rec) == _flight.RECORD.itemsize

cdef enum:
    BUSY_US = 20             # a timed native call tests without a pause for 20 us,
    SPIN_S_X1000 = 10        # then yields its core between tests, and naps after 10 ms
    NAP_NS = 50000


cdef inline long long _open(double t) noexcept:
    """A new record (the oldest goes): the call arrived at ``t``; its serial."""
    cdef long long serial = _OPENED[0]
    cdef Rec *r = &_RING[serial % _CAPACITY]
    _OPENED[0] = serial + 1
    memset(r, 0, sizeof(Rec))
    r.serial, r.arrived, r.phase, r.straggler = serial, t, _ENTERED, -1
    return serial


cdef inline Rec *_mine(long long serial) noexcept:
    cdef Rec *r = &_RING[serial % _CAPACITY]
    return r if r.serial == serial else NULL


cdef inline void _begun(long long serial, long long[::1] cell, MPI_Count count, int op, int dtype,
                        int algorithm) noexcept:
    """The call is the next on its communicator (``cell``: code, calls, rank)."""
    cdef Rec *r = _mine(serial)
    cell[1] += 1
    if r != NULL:
        r.comm, r.seq, r.rank, r.count = <int>cell[0], cell[1], <int>cell[2], count
        r.op, r.dtype, r.algorithm, r.phase = op, dtype, algorithm, _RUNNING


cdef inline void _closed(long long serial, double t) noexcept:
    """The call returned at ``t`` (a record the Python path already closed stays as it is)."""
    cdef Rec *r = _mine(serial)
    if r != NULL and r.phase < _DONE:
        r.exited, r.phase = t, _DONE


cdef int _poll(MPI_Request *request, double until) noexcept nogil:
    """Test ``request`` until it completes (MPI_SUCCESS) or ``until`` passes (-1); past its
    first BUSY_US the core goes to others between tests, as every wait of the library does."""
    cdef int flag = 0, ierr
    cdef double began = MPI_Wtime(), now
    cdef timespec nap
    nap.tv_sec, nap.tv_nsec = 0, NAP_NS
    while True:
        ierr = MPI_Test(request, &flag, MPI_STATUS_IGNORE)
        if ierr != MPI_SUCCESS or flag:
            return ierr
        now = MPI_Wtime()
        if now > until:
            return -1
        if now - began < BUSY_US / 1e6:
            continue            # a small call ends within microseconds: a syscall would double it
        if now - began < SPIN_S_X1000 / 1000.0:
            sched_yield()
        else:
            nanosleep(&nap, NULL)
