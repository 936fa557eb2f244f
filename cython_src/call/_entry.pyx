# cython: language_level=3, boundscheck=False, wraparound=False
"""The call room's compiled part: the entry of ``Allreduce`` and ``Comm.Allreduce``, and
``adopt`` for persistent requests.

A call's buffer specs are read here without Python work: for each, how it is
written (a bare buffer, ``[buf, dt]``, ``[buf, count, dt]``, ``[buf, (count,
displ), dt]``, ``[buf, count, displ, dt]``, a typecode string in place of the
datatype, in place), the type of the buffer object, its address and length, its
struct format when the datatype comes from it, and the given count, displacement
and datatype.  With the op, the ``straggler`` and ``algorithm`` arguments and the
settings' epoch, that is the key of a ``Binding``: what the full checks found
for those arguments (``_args.check``) and the decision they lead to.  Every
communicator's state keeps a few bindings (least recently used goes first), so
buffers that take turns, like gradient buckets, all hit.

- a hit whose decision is native is one ``MPI_Allreduce`` from C, with the GIL
  released (under STRAGGLAR_TIMEOUT an ``MPI_Iallreduce`` tested until the deadline);
- any other hit hands the kept ``Args``, bound to this call's memory, to the run;
- a miss (or a spec this file does not read: ``None`` or ``MPI.BOTTOM`` as the
  buffer, device arrays, a count that is not an ``int`` ...) runs the full checks
  in Python, and keeps a binding when the call may repeat.

Every call opens a flight record here (call/flight.py, _flight.pxi): a native hit
writes all of it in C, any other call's record is filled in by the Python path.

A late rank runs this right after it wakes up, while the others poll: every
microsecond of CPU here is several of wall time on an oversubscribed node.
"""
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS,
                             PyBUF_FORMAT, PyBUF_WRITABLE)
from cpython.object cimport PyObject
from cpython.sequence cimport PySequence_Fast_GET_ITEM, PySequence_Fast_GET_SIZE
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset, strcmp, strlen
from mpi4py cimport MPI
from mpi4py.libmpi cimport (MPI_Comm, MPI_Comm_get_attr, MPI_Count, MPI_Datatype, MPI_Iallreduce,
                            MPI_Op, MPI_IN_PLACE, MPI_Request, MPI_REQUEST_NULL, MPI_STATUS_IGNORE,
                            MPI_SUCCESS, MPI_Test, MPI_Wtime, MPI_DATATYPE_NULL)

from mpi4py import MPI as _MPI

from ..bind.args import Args
from ..core import config as _config
from ..core.state import KEYVAL
from ..memory.buffers import Message
from . import flight as _flight
from .allreduce import call as _miss, repeat as _repeat, timed_out_natively as _timed_out

include "_flight.pxi"

cdef extern from "mpi_compat.h" nogil:
    int smpi_allreduce(const void *, void *, MPI_Count, MPI_Datatype, MPI_Op, MPI_Comm)

cdef extern from "Python.h":
    bint PyList_CheckExact(object)
    bint PyTuple_CheckExact(object)
    bint PyLong_CheckExact(object)
    bint PyUnicode_CheckExact(object)
    void PyErr_Clear()
    Py_ssize_t PyLong_AsSsize_t(object) noexcept     # -1 and an error set on overflow

cdef enum:
    CAPACITY = 8          # bindings per communicator
    FORMAT_BYTES = 16     # longest buffer format kept in a key (longer: not bound)
    # How a spec is written (a listed one adds 8 * its length).
    IN_PLACE = 1
    BARE = 2              # a buffer alone
    LISTED = 3            # [buf, ...]: which of count, displ, datatype were given is in the Form

cdef object _SUM = _MPI.SUM
cdef object _Datatype = _MPI.Datatype
cdef object _IN_PLACE = _MPI.IN_PLACE
cdef object _BottomType = type(_MPI.BOTTOM)
cdef int _keyval = KEYVAL          # the communicator attribute that holds the library's state
cdef long long[::1] _EPOCH = _config.EPOCH   # the settings' epoch, read in C (-1: none in force)
cdef tuple _ARGS_FIELDS = Args.__slots__


cdef struct Form:
    int shape
    void *kind              # the buffer object's type
    char *address
    Py_ssize_t nbytes
    Py_ssize_t count        # -1: not given
    Py_ssize_t displ        # -1: not given
    MPI_Datatype datatype   # MPI_DATATYPE_NULL: not given as an MPI.Datatype
    void *code              # a typecode string given for the datatype (its identity), or NULL
    char format[FORMAT_BYTES]


cdef inline bint _int_item(object x, Py_ssize_t *out):
    if not PyLong_CheckExact(x):
        return False
    out[0] = PyLong_AsSsize_t(x)
    if out[0] < 0:
        PyErr_Clear()
        return False
    return True


cdef inline bint _datatype_item(object x, Form *f):
    if type(x) is _Datatype:
        f.datatype = (<MPI.Datatype>x).ob_mpi
        return True
    if PyUnicode_CheckExact(x):
        f.code = <void *>x
        return True
    return False


cdef inline bint _count_item(object x, Form *f):
    """``count`` or ``(count, displ)``."""
    cdef object c, d
    if _list_or_tuple(x) and PySequence_Fast_GET_SIZE(x) == 2:
        c, d = _item(x, 0), _item(x, 1)
    else:
        return _int_item(x, &f.count)
    return _int_item(c, &f.count) and _int_item(d, &f.displ)


cdef inline bint _list_or_tuple(object x):
    return PyList_CheckExact(x) or PyTuple_CheckExact(x)


cdef inline object _item(object seq, Py_ssize_t i):
    """Item ``i`` of an exact list or tuple (borrowed, then owned by the caller)."""
    return <object>PySequence_Fast_GET_ITEM(seq, i)


cdef object _listed(object spec, Form *f):
    """Fill ``f`` from a list/tuple spec; its buffer object, or None if it is not one
    this file reads."""
    cdef Py_ssize_t n
    if not _list_or_tuple(spec):
        return None
    n = PySequence_Fast_GET_SIZE(spec)       # exact lists and tuples: no copy, no check
    if n < 2 or n > 4:
        return None
    x0, x1 = _item(spec, 0), _item(spec, 1)
    x2 = _item(spec, 2) if n > 2 else None
    x3 = _item(spec, 3) if n > 3 else None
    f.shape = LISTED + 8 * n
    if n == 2:
        ok = _datatype_item(x1, f) or _count_item(x1, f)
    elif n == 3:
        ok = _count_item(x1, f) and _datatype_item(x2, f)
    else:
        ok = _int_item(x1, &f.count) and _int_item(x2, &f.displ) and _datatype_item(x3, f)
    return x0 if ok else None


cdef inline void _clear(Form *f, int shape):
    f.shape = shape
    f.kind = NULL
    f.address = NULL
    f.nbytes = 0
    f.count = f.displ = -1
    f.datatype = MPI_DATATYPE_NULL
    f.code = NULL
    f.format[0] = 0


cdef bint read_form(object spec, bint writable, Form *f, Py_buffer *view):
    """Read one spec into ``f`` and export its buffer into ``view`` (held on True).
    False, with nothing held and no error set, for a spec left to the full checks."""
    cdef object obj = spec
    cdef int flags = PyBUF_ANY_CONTIGUOUS
    _clear(f, BARE)
    if _list_or_tuple(spec):
        obj = _listed(spec, f)
    if obj is None or type(obj) is _BottomType:
        return False
    if writable:
        flags |= PyBUF_WRITABLE
    if f.datatype == MPI_DATATYPE_NULL and f.code == NULL:
        flags |= PyBUF_FORMAT
    try:
        PyObject_GetBuffer(obj, view, flags)
    except BaseException:
        return False
    if flags & PyBUF_FORMAT:
        if view.format == NULL:
            f.format[0], f.format[1] = c'B', 0
        elif strlen(view.format) < FORMAT_BYTES:
            memcpy(f.format, view.format, strlen(view.format) + 1)
        else:
            PyBuffer_Release(view)
            return False
    f.kind = <void *>(<PyObject *>obj).ob_type
    f.address = <char *>view.buf
    f.nbytes = view.len
    return True


cdef inline bint same_form(Form *a, Form *b):
    if (a.shape != b.shape or a.kind != b.kind or a.address != b.address or a.nbytes != b.nbytes
            or a.count != b.count or a.displ != b.displ or a.datatype != b.datatype):
        return False
    if a.code != b.code:
        if a.code == NULL or b.code == NULL or <object>a.code != <object>b.code:
            return False
    return a.format[0] == 0 or strcmp(a.format, b.format) == 0


cdef class Held:
    """A buffer export held for the duration of a call (as an MPI.buffer would be)."""
    cdef Py_buffer view
    cdef bint held

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)


cdef Held _hold(Py_buffer *view):
    cdef Held h = Held.__new__(Held)
    h.view = view[0]
    h.held = True
    return h


cdef class Binding:
    """What the checks of one call found, and the key that recognises its repeats."""
    cdef Form send, recv
    cdef object op, straggler, algorithm, code_send, code_recv
    cdef long epoch
    cdef readonly object args          # the kept Args, without buffers
    cdef readonly bint native          # one MPI_Allreduce from C
    cdef Py_ssize_t send_offset, recv_offset
    cdef MPI_Count count
    cdef MPI_Datatype datatype
    cdef MPI_Op mpi_op
    cdef unsigned long used
    cdef long long[::1] cell               # its communicator's flight code, calls, rank
    cdef int op_code, dtype_code, algo_code
    cdef double timeout                    # a native call's STRAGGLAR_TIMEOUT (0: none)
    cdef char *scratch                     # where a timed native call reduces
    cdef object pending                    # its request, when it timed out
    cdef Py_ssize_t nbytes

    def __dealloc__(self):
        free(self.scratch)

    cdef bint matches(self, Form *send, Form *recv, object op, object straggler, object algorithm,
                      long epoch):
        if op is not self.op or self.epoch != epoch or (<MPI.Op>op).ob_mpi != self.mpi_op:
            return False
        if straggler is not self.straggler and not (type(straggler) is type(self.straggler)
                                                    and straggler == self.straggler):
            return False
        if algorithm is not self.algorithm and not (type(algorithm) is type(self.algorithm)
                                                    and algorithm == self.algorithm):
            return False
        return same_form(&self.recv, recv) and (
            (send.shape == IN_PLACE and self.send.shape == IN_PLACE) or same_form(&self.send, send))


cdef class Bindings:
    """A communicator's bindings (at most CAPACITY), and what its native hits did."""
    cdef list entries
    cdef unsigned long clock
    cdef readonly unsigned long hits, misses, native_calls
    cdef readonly double t_call, t_end     # of the last native hit
    cdef readonly object args              # of the last native hit: its Args (policy, why)
    cdef public bint last_was_hit          # False once the Python path records a call

    def __cinit__(self):
        self.entries = []

    def clear(self):
        self.entries = []

    def __len__(self):
        return len(self.entries)

    cdef Binding find(self, Form *send, Form *recv, object op, object straggler, object algorithm,
                      long epoch):
        cdef Binding b
        for item in self.entries:
            b = <Binding>item
            if b.matches(send, recv, op, straggler, algorithm, epoch):
                self.clock += 1
                b.used = self.clock
                self.hits += 1
                return b
        self.misses += 1
        return None

    cdef void add(self, Binding b):
        cdef Binding old
        cdef Py_ssize_t i, oldest = 0
        self.clock += 1
        b.used = self.clock
        if len(self.entries) < CAPACITY:
            self.entries.append(b)
            return
        for i in range(1, CAPACITY):
            if (<Binding>self.entries[i]).used < (<Binding>self.entries[oldest]).used:
                oldest = i
        self.entries[oldest] = b


cdef int _allreduce(void *send, void *recv, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                    MPI_Comm comm) noexcept nogil:
    """The one MPI call of a native hit (large-count where the MPI has it: mpi_compat.h)."""
    return smpi_allreduce(send, recv, count, datatype, op, comm)


cdef object _state(object comm):
    """The library's state of ``comm``, or None (without creating it)."""
    cdef void *value = NULL
    cdef int found = 0
    if not isinstance(comm, MPI.Comm):
        return None
    if MPI_Comm_get_attr((<MPI.Comm>comm).ob_mpi, _keyval, &value, &found) != MPI_SUCCESS or not found:
        return None
    return <object>value


cdef object _native(Bindings bs, Binding b, MPI.Comm comm, Form *send, Form *recv, double t_call,
                    long long serial, object state):
    cdef int ierr
    cdef void *sbuf = MPI_IN_PLACE if send.shape == IN_PLACE else <void *>(send.address + b.send_offset)
    cdef void *rbuf = <void *>(recv.address + b.recv_offset)
    if b.timeout > 0:
        ierr = _timed(b, comm, sbuf, rbuf, t_call + b.timeout)
        if ierr == -1:
            raise _timed_out(state, serial, b.timeout, _given_up(b))
    else:
        with nogil:
            ierr = _allreduce(sbuf, rbuf, b.count, b.datatype, b.mpi_op, comm.ob_mpi)
    if ierr != MPI_SUCCESS:
        error = _MPI.Exception(ierr)
        _flight.failed(serial, error)
        raise error
    bs.native_calls += 1
    bs.t_call, bs.t_end, bs.args, bs.last_was_hit = t_call, MPI_Wtime(), b.args, True
    _closed(serial, bs.t_end)
    return None


cdef int _timed(Binding b, MPI.Comm comm, void *sbuf, void *rbuf, double until) except -2:
    """A native call under STRAGGLAR_TIMEOUT: MPI_Iallreduce on the caller's communicator
    (where its untimed repeats and misses run too) into the binding's scratch, tested
    until ``until`` (-1: it passed), copied out on success: a request that times out
    writes there, never into the caller's buffer."""
    cdef int ierr
    cdef MPI_Request request = MPI_REQUEST_NULL
    memcpy(b.scratch, rbuf if sbuf == MPI_IN_PLACE else sbuf, b.nbytes)
    with nogil:
        ierr = MPI_Iallreduce(MPI_IN_PLACE, b.scratch, <int>b.count, b.datatype, b.mpi_op,
                              comm.ob_mpi, &request)
        if ierr == MPI_SUCCESS:
            ierr = _poll(&request, until)
    if ierr == -1:
        b.pending = _MPI.Request()
        (<MPI.Request>b.pending).ob_mpi = request
    elif ierr == MPI_SUCCESS:
        memcpy(rbuf, b.scratch, b.nbytes)
    return ierr


cdef object _given_up(Binding b):
    """What a timed-out native call leaves to MPI for good: its request and scratch (the
    binding no longer frees it)."""
    kept = (b.pending, <size_t>b.scratch)
    b.scratch, b.pending = NULL, None
    return kept


cdef object _bound(Binding b, object sendbuf, object recvbuf, Form *send, Form *recv,
                   Py_buffer *sview, Py_buffer *rview):
    """The kept Args bound to this call's memory (the exports move into the Messages),
    made here without a Python frame."""
    k = b.args
    out = _message(k.out, _hold(rview), _obj(recvbuf), <Py_ssize_t>(recv.address + b.recv_offset))
    if send.shape == IN_PLACE:
        src = out
    else:
        src = _message(k.out, _hold(sview), _obj(sendbuf), <Py_ssize_t>(send.address + b.send_offset))
    args = Args.__new__(Args)
    for name in _ARGS_FIELDS:
        setattr(args, name, getattr(k, name))
    args.sendbuf, args.recvbuf, args.out, args.src = sendbuf, recvbuf, out, src
    return args


cdef object _message(object kept, object held, object obj, Py_ssize_t address):
    """A Message of ``kept``'s count and datatype at ``address`` (``Message.__init__`` unrun)."""
    m = Message.__new__(Message)
    m.buf, m.obj, m.address = held, obj, address
    m.count, m.datatype, m.extent, m.memory = kept.count, kept.datatype, kept.extent, kept.memory
    return m


cdef inline object _obj(object spec):
    if _list_or_tuple(spec):
        return spec[0]
    return spec


cdef bint _read_send(object sendbuf, Form *send, Py_buffer *view):
    if sendbuf is None or sendbuf is _IN_PLACE:
        _clear(send, IN_PLACE)
        return True
    return read_form(sendbuf, False, send, view)


cdef object _call(object comm, object sendbuf, object recvbuf, object op, object straggler,
                  object algorithm):
    cdef Form send, recv
    cdef Py_buffer sview, rview
    cdef Binding b = None
    cdef Bindings bs = None
    cdef long epoch = _EPOCH[0]
    cdef double t_call = MPI_Wtime()
    cdef long long serial = _open(t_call)
    cdef bint readable = read_form(recvbuf, True, &recv, &rview)
    if readable and not _read_send(sendbuf, &send, &sview):
        PyBuffer_Release(&rview)
        readable = False
    state = _state(comm) if readable else None
    if state is not None and state.bindings is not None:
        bs = <Bindings>state.bindings
        b = bs.find(&send, &recv, op, straggler, algorithm, epoch)
    if b is None:
        if readable:
            _release(&send, &sview, &rview)
        args = _miss(comm, sendbuf, recvbuf, op, straggler, algorithm, serial)
        _closed(serial, MPI_Wtime())
        if args is not None and readable:
            _keep(comm, args, &send, &recv, op, straggler, algorithm)
        return None
    _begun(serial, b.cell, b.count, b.op_code, b.dtype_code, b.algo_code)
    if b.native:
        try:
            return _native(bs, b, <MPI.Comm>comm, &send, &recv, t_call, serial, state)
        finally:
            _release(&send, &sview, &rview)
    _repeat(comm, state, _bound(b, sendbuf, recvbuf, &send, &recv, &sview, &rview),
            _config._current, serial)
    _closed(serial, MPI_Wtime())


cdef inline void _release(Form *send, Py_buffer *sview, Py_buffer *rview):
    PyBuffer_Release(rview)
    if send.shape != IN_PLACE:
        PyBuffer_Release(sview)


cdef void _keep(object comm, object args, Form *send, Form *recv, object op, object straggler,
                object algorithm) except *:
    """A binding of a checked call (``args`` holds its messages, ``send``/``recv`` its key)."""
    state = _state(comm)
    settings = _config._current
    if (state is None or state.broken or not args.out.datatype.is_predefined or settings is None
            or getattr(state, "flight", None) is None):
        return     # a derived datatype's handle may be freed and reused: checked every call
    if state.bindings is None:
        state.bindings = Bindings()
    cdef Binding b = Binding.__new__(Binding)
    b.send, b.recv = send[0], recv[0]
    b.code_send = None if send.code == NULL else <object>send.code   # keeps the strings alive
    b.code_recv = None if recv.code == NULL else <object>recv.code
    b.op, b.straggler, b.algorithm, b.epoch = op, straggler, algorithm, settings.epoch
    b.args, b.native = args.unbound(), args.native_from_c
    b.recv_offset = args.out.address - <Py_ssize_t>recv.address
    b.send_offset = 0 if send.shape == IN_PLACE else args.src.address - <Py_ssize_t>send.address
    b.count = args.out.count
    b.datatype = (<MPI.Datatype>args.out.datatype).ob_mpi
    b.mpi_op = (<MPI.Op>op).ob_mpi
    b.cell = state.flight
    b.op_code, b.dtype_code, b.algo_code = _flight.codes(args)
    if b.native and settings.timeout:
        b.timeout, b.nbytes = settings.timeout, args.out.count * args.out.extent
        b.scratch = <char *>malloc(max(b.nbytes, 1))
        if b.scratch == NULL:
            raise MemoryError()
    (<Bindings>state.bindings).add(b)


def Allreduce(comm, sendbuf, recvbuf, op=_SUM, *, straggler=None, algorithm=None):
    """Drop-in for ``comm.Allreduce(sendbuf, recvbuf, op)``.

    ``straggler``: who plays the straggler: a rank; "arrival" (the last rank to
    call, found at run time; the default); or "predict" (the rank that came
    last most often in recent calls, found without waiting).
    ``algorithm``: "auto" (default: native for small buffers or no delay,
    StragglAR when the observed delay pays), "stragglar", "hierarchical" (StragglAR
    on two tiers, for communicators that span nodes), "hring" (the hierarchical ring:
    ReduceScatter inside each node, a ring per lane across nodes, AllGather inside;
    the flat ring on one node), "ring", "rhd", "direct" or "native"; the
    STRAGGLAR_ALGO environment variable overrides it.
    Non-commutative ops, pair types (MAXLOC/MINLOC), derived datatypes and a
    single rank always take the native path.
    With STRAGGLAR_TIMEOUT set, a call that waits longer raises
    ``StragglerTimeout`` on every waiting rank; with STRAGGLAR_VALIDATE=1 every
    rank checks that all ranks passed the same arguments.
    """
    _call(comm, sendbuf, recvbuf, op, straggler, algorithm)


def comm_allreduce(self, sendbuf, recvbuf, op=_SUM):
    """``Allreduce`` as mpi4py's, run by ``stragglar_mpi.Allreduce`` with its defaults."""
    _call(self, sendbuf, recvbuf, op, None, None)



def adopt(MPI.Request target, MPI.Request source):
    """``target`` takes ``source``'s handle (``source`` keeps a copy; MPI frees it once).

    The one thing mpi4py has no Python call for: a persistent request is a new
    generalized request on every Start, and the object the caller holds takes its
    handle, so that mpi4py's ``Request.Waitall``, ``Testall`` ... see the operation in
    flight (call/requests.py)."""
    target.ob_mpi = source.ob_mpi
