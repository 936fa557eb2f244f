# A failed machine gives up what it posted: cancels its receives, waits a little for them.

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
