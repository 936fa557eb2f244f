/* Large-count MPI calls on every MPI.
 *
 * MPI-4 has the large-count ("_c") calls; MPI-3.1 libraries (Open MPI 4.1 and 5,
 * MVAPICH2, Intel MPI 2021, older Cray MPICH) only have int counts.  The
 * extensions call these wrappers, which take an MPI_Count everywhere:
 *   - MPI_VERSION >= 4: the _c call itself;
 *   - MPI-3.1, up to INT_MAX elements: the int-count call;
 *   - MPI-3.1, more: a message of one derived datatype that holds all the elements
 *     (point-to-point: the type signature is the same count of the same basic type
 *     on both ends, so sender and receiver need not agree on anything else), or,
 *     for the elementwise calls (Reduce_local, Allreduce), a loop over pieces.
 */
#ifndef STRAGGLAR_MPI_COMPAT_H
#define STRAGGLAR_MPI_COMPAT_H

#include <limits.h>
#include <mpi.h>

#if defined(MPI_VERSION) && MPI_VERSION >= 4
#define SMPI_LARGE_COUNT 1
#else
#define SMPI_LARGE_COUNT 0
#endif

/* The MPI the extension was compiled against, for `stragglar-mpi info`. */
#define SMPI_MPI_VERSION MPI_VERSION
#define SMPI_MPI_SUBVERSION MPI_SUBVERSION

/* Pieces of the MPI-3.1 path; 2**30 elements so a piece always fits an int. */
#define SMPI_PIECE ((MPI_Count)1 << 30)

#if SMPI_LARGE_COUNT

static inline int smpi_isend(const void *buf, MPI_Count count, MPI_Datatype type, int dest,
                             int tag, MPI_Comm comm, MPI_Request *req)
{
    return MPI_Isend_c(buf, count, type, dest, tag, comm, req);
}

static inline int smpi_irecv(void *buf, MPI_Count count, MPI_Datatype type, int source,
                             int tag, MPI_Comm comm, MPI_Request *req)
{
    return MPI_Irecv_c(buf, count, type, source, tag, comm, req);
}

static inline int smpi_reduce_local(const void *in, void *inout, MPI_Count count,
                                    MPI_Datatype type, MPI_Op op)
{
    return MPI_Reduce_local_c(in, inout, count, type, op);
}

static inline int smpi_allreduce(const void *send, void *recv, MPI_Count count,
                                 MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
    return MPI_Allreduce_c(send, recv, count, type, op, comm);
}

#else /* MPI-3.1 */

/* `count` elements of `type` as one element of a new committed type:
 * q pieces of SMPI_PIECE elements, then the remaining r elements. */
static int smpi_big_type(MPI_Count count, MPI_Datatype type, MPI_Datatype *big)
{
    MPI_Count q = count / SMPI_PIECE, r = count % SMPI_PIECE;
    MPI_Aint lb = 0, extent = 0;
    MPI_Datatype piece, parts[2];
    int lens[2] = {1, (int)r};
    MPI_Aint disps[2];
    int ierr = MPI_Type_get_extent(type, &lb, &extent);
    if (ierr == MPI_SUCCESS)
        ierr = MPI_Type_contiguous((int)SMPI_PIECE, type, &piece);
    if (ierr != MPI_SUCCESS)
        return ierr;
    ierr = MPI_Type_contiguous((int)q, piece, &parts[0]);
    MPI_Type_free(&piece);
    if (ierr != MPI_SUCCESS)
        return ierr;
    parts[1] = type;
    disps[0] = 0;
    disps[1] = (MPI_Aint)(q * SMPI_PIECE) * extent;
    ierr = MPI_Type_create_struct(r ? 2 : 1, lens, disps, parts, big);
    MPI_Type_free(&parts[0]);
    if (ierr == MPI_SUCCESS)
        ierr = MPI_Type_commit(big);
    return ierr;
}

static inline int smpi_isend(const void *buf, MPI_Count count, MPI_Datatype type, int dest,
                             int tag, MPI_Comm comm, MPI_Request *req)
{
    MPI_Datatype big;
    int ierr;
    if (count <= INT_MAX)
        return MPI_Isend(buf, (int)count, type, dest, tag, comm, req);
    ierr = smpi_big_type(count, type, &big);
    if (ierr != MPI_SUCCESS)
        return ierr;
    ierr = MPI_Isend(buf, 1, big, dest, tag, comm, req);
    MPI_Type_free(&big);   /* a pending request keeps what it needs */
    return ierr;
}

static inline int smpi_irecv(void *buf, MPI_Count count, MPI_Datatype type, int source,
                             int tag, MPI_Comm comm, MPI_Request *req)
{
    MPI_Datatype big;
    int ierr;
    if (count <= INT_MAX)
        return MPI_Irecv(buf, (int)count, type, source, tag, comm, req);
    ierr = smpi_big_type(count, type, &big);
    if (ierr != MPI_SUCCESS)
        return ierr;
    ierr = MPI_Irecv(buf, 1, big, source, tag, comm, req);
    MPI_Type_free(&big);
    return ierr;
}

static inline int smpi_reduce_local(const void *in, void *inout, MPI_Count count,
                                    MPI_Datatype type, MPI_Op op)
{
    MPI_Aint lb = 0, extent = 0;
    MPI_Count done = 0, n;
    int ierr;
    if (count <= INT_MAX)
        return MPI_Reduce_local(in, inout, (int)count, type, op);
    ierr = MPI_Type_get_extent(type, &lb, &extent);
    for (; ierr == MPI_SUCCESS && done < count; done += n) {
        n = count - done < SMPI_PIECE ? count - done : SMPI_PIECE;
        ierr = MPI_Reduce_local((const char *)in + done * extent, (char *)inout + done * extent,
                                (int)n, type, op);
    }
    return ierr;
}

static inline int smpi_allreduce(const void *send, void *recv, MPI_Count count,
                                 MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
    MPI_Aint lb = 0, extent = 0;
    MPI_Count done = 0, n;
    int ierr;
    if (count <= INT_MAX)
        return MPI_Allreduce(send, recv, (int)count, type, op, comm);
    ierr = MPI_Type_get_extent(type, &lb, &extent);
    for (; ierr == MPI_SUCCESS && done < count; done += n) {
        n = count - done < SMPI_PIECE ? count - done : SMPI_PIECE;
        ierr = MPI_Allreduce(send == MPI_IN_PLACE ? MPI_IN_PLACE : (const char *)send + done * extent,
                             (char *)recv + done * extent, (int)n, type, op, comm);
    }
    return ierr;
}

#endif /* SMPI_LARGE_COUNT */

#endif /* STRAGGLAR_MPI_COMPAT_H */
