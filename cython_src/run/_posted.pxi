# What a machine has posted in the current round, and the one test that completes it.

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
