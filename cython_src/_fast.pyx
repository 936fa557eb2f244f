# cython: language_level=3
"""A repeated call, compiled (see stragglar_mpi/_args.py, which keeps one per communicator).

A training loop passes arrays over the same memory, with the same op, every step.
``Repeat`` holds what the full checks of one call found and recognises a call that
passes arrays of the same type over the same memory, with the same dtype and
writability, the same op, straggler and algorithm arguments and the same settings:
every check would give the same answer.  ``match`` then hands back the kept
``Args`` bound to this call's buffers, and ``run_native`` runs a repeat whose
algorithm is native with one ``MPI_Allreduce`` here, so ``auto`` below its size cut
costs what ``comm.Allreduce`` costs.  A late rank runs this path right after it
wakes up, while the others poll: every microsecond of CPU here is several of wall
time on an oversubscribed node, which is why it is compiled.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE
from mpi4py cimport MPI
from mpi4py.libmpi cimport MPI_Comm, MPI_Count, MPI_Datatype, MPI_IN_PLACE, MPI_Op, MPI_SUCCESS, MPI_Wtime

cdef extern from "mpi_compat.h" nogil:
    int smpi_allreduce(const void *, void *, MPI_Count, MPI_Datatype, MPI_Op, MPI_Comm)

from mpi4py import MPI as _MPI

# Set by init(): os.environ's byte-keyed dict and the settings a repeat depends on
# (STRAGGLAR_ALGO, _AUTO_MIN_BYTES, _TIMEOUT, _VALIDATE), the communicator
# attribute that holds the library's state, and the Python classes of a call.
cdef object _RAW = None
cdef tuple _KEYS = ()
cdef object _KEYVAL = None
cdef object _Args = None
cdef object _Message = None


def init(raw, keys, keyval, args_class, message_class):
    global _RAW, _KEYS, _KEYVAL, _Args, _Message
    _RAW, _KEYS, _KEYVAL, _Args, _Message = raw, tuple(keys), keyval, args_class, message_class


cdef tuple _settings():
    return tuple([_RAW.get(k) for k in _KEYS])


cdef class Side:
    """One kept buffer: its type, dtype, address and size."""
    cdef object kind, dtype
    cdef Py_ssize_t address, nbytes

    def __init__(self, array, Py_ssize_t address, Py_ssize_t nbytes):
        self.kind, self.dtype = type(array), array.dtype
        self.address, self.nbytes = address, nbytes

    cdef bint take(self, obj, Py_buffer *view, bint writable):
        """Export ``obj`` into ``view`` if it has this layout (else export nothing)."""
        if type(obj) is not self.kind:
            return False
        try:
            PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS | (PyBUF_WRITABLE if writable else 0))
        except (BufferError, TypeError, ValueError):
            return False
        if view.buf == <void *>self.address and view.len == self.nbytes and obj.dtype == self.dtype:
            return True
        PyBuffer_Release(view)
        return False


cdef class Repeat:
    """The kept checks of one call; see the module's docstring."""
    cdef readonly object args        # the kept Args, without buffers
    cdef object op, key, settings
    cdef Side recv, send             # send is None in place
    cdef readonly bint native        # the kept call ran native, with no timeout or validation

    def __init__(self, args, kept, straggler, algorithm, bint native):
        self.args, self.op, self.native = kept, args.op, native
        self.key = (type(straggler), straggler, type(algorithm), algorithm)
        self.settings = _settings()
        self.recv = Side(args.recvbuf, args.out.address, args.out.count * args.out.extent)
        self.send = None if args.in_place else Side(args.sendbuf, args.src.address,
                                                    args.src.count * args.src.extent)

    cdef bint _same_call(self, sendbuf, op, straggler, algorithm, bint all_settings):
        if op is not self.op or (self.send is None) != (sendbuf is None or sendbuf is _MPI.IN_PLACE):
            return False
        if (type(straggler), straggler, type(algorithm), algorithm) != self.key:
            return False
        now = _settings()
        if all_settings:
            return now == self.settings
        return now[0] == self.settings[0] and now[1] == self.settings[1]

    def match(self, sendbuf, recvbuf, op, straggler, algorithm):
        """This call's Args if it repeats the kept one, else None (then check it in full)."""
        cdef Py_buffer rview, sview
        if not self._same_call(sendbuf, op, straggler, algorithm, False):
            return None
        if not self.recv.take(recvbuf, &rview, True):
            return None
        PyBuffer_Release(&rview)
        if self.send is not None:
            if not self.send.take(sendbuf, &sview, False):
                return None
            PyBuffer_Release(&sview)
        k = self.args
        out = _bound(k.out, recvbuf)
        src = out if self.send is None else _bound(k.src, sendbuf)
        return _Args(k.n, k.policy, sendbuf, recvbuf, op, k.in_place, out, src, k.name, k.signature)

    def run_native(self, state, MPI.Comm comm, sendbuf, recvbuf, op, straggler, algorithm):
        """Run a native repeat with one MPI_Allreduce and record it; False if not one."""
        cdef Py_buffer rview, sview
        cdef void *send_address = MPI_IN_PLACE
        cdef int ierr
        cdef double t_call = MPI_Wtime()
        if not self.native or not self._same_call(sendbuf, op, straggler, algorithm, True):
            return False
        if not self.recv.take(recvbuf, &rview, True):
            return False
        if self.send is not None:
            if not self.send.take(sendbuf, &sview, False):
                PyBuffer_Release(&rview)
                return False
            send_address = sview.buf
        k = self.args
        cdef MPI_Count count = k.out.count
        cdef MPI.Datatype datatype = k.out.datatype
        cdef MPI.Op mpi_op = self.op
        try:
            with nogil:
                ierr = smpi_allreduce(send_address, rview.buf, count, datatype.ob_mpi, mpi_op.ob_mpi,
                                       comm.ob_mpi)
        finally:
            PyBuffer_Release(&rview)
            if self.send is not None:
                PyBuffer_Release(&sview)
        if ierr != MPI_SUCCESS:
            raise _MPI.Exception(ierr)
        state.calls["native"] += 1
        state.last = ("native", None, k.policy, t_call, t_call, None, MPI_Wtime(), None)
        return True


def _bound(kept, obj):
    buf = _MPI.buffer(obj)        # held by the Message for the duration of the call
    return _Message(buf, obj, buf.address, kept.count, kept.datatype, kept.extent)


def run_native(comm, sendbuf, recvbuf, op, straggler, algorithm):
    """``Allreduce`` for a native repeat on ``comm``: True if it ran here."""
    if not isinstance(comm, _MPI.Comm):
        return False
    state = (<MPI.Comm>comm).Get_attr(_KEYVAL)
    if state is None or state.broken is not None:
        return False
    repeat = state.repeat
    if repeat is None or not (<Repeat>repeat).native:
        return False
    return (<Repeat>repeat).run_native(state, comm, sendbuf, recvbuf, op, straggler, algorithm)
