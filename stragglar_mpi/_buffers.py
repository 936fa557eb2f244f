"""Buffer specs, resolved the way mpi4py resolves them for ``Allreduce``.

mpi4py validates first (``Allreduce_init`` on COMM_SELF goes through exactly the
message parsing of ``Allreduce`` and moves no data), so every mistake raises the
exception type and message that mpi4py gives.  Then we take the address, count
and datatype for ourselves.  On an MPI-3.1 library (no ``MPI_Allreduce_init``)
mpi4py parses the same way and then raises NotImplementedError (or, above INT_MAX
elements, MPI_ERR_ARG: its int-count fallback), which passes.
"""
from __future__ import annotations

from mpi4py import MPI

from ._features import persistent_collectives

_STRIP = "<>=@!|"


class Message:
    """A resolved buffer: where the data is, how many elements, of which datatype."""

    __slots__ = ("buf", "obj", "address", "count", "datatype", "extent")

    def __init__(self, buf, obj, address, count, datatype, extent=None):
        self.buf = buf            # MPI.buffer; holds the export for the duration of the call
        self.obj = obj            # what the caller passed (device detection looks at it)
        self.address, self.count, self.datatype = address, count, datatype
        self.extent = datatype.Get_extent()[1] if extent is None else extent


def is_in_place(sendbuf) -> bool:
    return sendbuf is None or sendbuf is MPI.IN_PLACE


def validate(sendbuf, recvbuf, op) -> None:
    """Raise what ``comm.Allreduce(sendbuf, recvbuf, op)`` raises for a bad spec."""
    if not isinstance(op, MPI.Op):
        raise TypeError(f"Argument 'op' has incorrect type (expected mpi4py.MPI.Op, got {type(op).__name__})")
    sendbuf = MPI.IN_PLACE if is_in_place(sendbuf) else sendbuf
    try:
        MPI.COMM_SELF.Allreduce_init(sendbuf, recvbuf, op).Free()
    except (NotImplementedError, MPI.Exception) as exc:
        # Raised only after mpi4py's message parsing accepted the arguments.
        if persistent_collectives() or not _missing_call(exc):
            raise


def _missing_call(exc) -> bool:
    return isinstance(exc, NotImplementedError) or exc.Get_error_class() == MPI.ERR_ARG


def resolve(spec, readonly: bool) -> Message:
    """(address, count, datatype) of a buffer spec already accepted by ``validate``."""
    obj, count, displ, datatype = _split(spec)
    buf = MPI.buffer(obj) if readonly else _writable(obj)
    datatype = _datatype(obj, buf, datatype)
    extent = datatype.Get_extent()[1]
    if count is None:
        count = (buf.nbytes // extent) - displ if extent else 0
    return Message(buf, obj, buf.address + displ * extent, count, datatype, extent)


def _writable(obj):
    buf = MPI.buffer(obj)
    if buf.readonly:
        raise BufferError("buffer is not writable")
    return buf


def _split(spec):
    """(object, count or None, displacement, datatype or None) of a spec."""
    if not isinstance(spec, (list, tuple)):
        return spec, None, 0, None
    obj, rest = spec[0], list(spec[1:])
    datatype = rest.pop() if rest and isinstance(rest[-1], (MPI.Datatype, str)) else None
    count, displ = None, 0
    if len(rest) == 1:
        count = rest[0]
        if isinstance(count, (list, tuple)):
            count, displ = count
    elif len(rest) == 2:
        count, displ = rest
    return obj, (None if count is None else int(count)), int(displ or 0), datatype


def _datatype(obj, buf, datatype):
    if isinstance(datatype, MPI.Datatype):
        return datatype
    return MPI.Datatype.fromcode(datatype if isinstance(datatype, str) else typecode(obj, buf))


def typecode(obj, buf=None) -> str:
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        import numpy as np
        return np.dtype(cai["typestr"]).char
    dtype = getattr(obj, "dtype", None)
    if dtype is not None:
        import numpy as np
        try:
            return np.dtype(dtype).char
        except TypeError:
            pass
    fmt = memoryview(obj).format if buf is None or buf.format == "B" else buf.format
    return fmt.lstrip(_STRIP) or "B"
