"""Buffer specs, resolved by mpi4py's rules for ``Allreduce``, with mpi4py's errors.

The rules are those of mpi4py's message parsing (``message_simple`` and
``for_allreduce`` in its msgbuffer.pxi), followed here step by step so that a bad
spec raises the exception type and message that ``comm.Allreduce`` raises (a
read-only receive buffer: the same ``BufferError``, in our words), and nothing in
MPI is called (no ``Allreduce_init``: this works on MPI-3.1 too):

- a spec is a buffer (buffer protocol, DLPack or CUDA array interface), or a list
  or tuple ``[buf, datatype]``, ``[buf, count]``, ``[buf, count, datatype]``,
  ``[buf, (count, displ), datatype]`` or ``[buf, count, displ, datatype]``; a
  datatype is an ``MPI.Datatype`` or a typecode string;
- ``None`` or ``MPI.BOTTOM`` as the buffer: address ``MPI_BOTTOM``, no bytes, a
  datatype is required (``[None, MPI.INT]`` is a null, zero-size message);
- without a count, the count is the buffer's length over the datatype's extent;
- ``None`` or ``MPI.IN_PLACE`` as the send buffer: in place;
- the send and receive datatypes (handles) and counts must agree.

A device array (``_cuda.describe_device``) resolves like a host array of the same
layout, into a Message whose address is on the device and whose ``memory`` says so.
"""
from __future__ import annotations

import operator
import sys

from mpi4py import MPI

from . import cuda as _cuda

_BYTE_FORMAT = "B"


class Message:
    """A resolved buffer: where the data is, how many elements, of which datatype, and
    in which memory ("host", "device" or "managed": the CUDA driver's answer)."""

    __slots__ = ("buf", "obj", "address", "count", "datatype", "extent", "memory")

    def __init__(self, buf, obj, address, count, datatype, extent=None, memory="host"):
        self.buf = buf            # MPI.buffer (or None at MPI_BOTTOM); holds the export for the call
        self.obj = obj            # what the caller passed
        self.address, self.count, self.datatype = address, count, datatype
        self.extent = datatype.Get_extent()[1] if extent is None else extent
        self.memory = memory

    def retyped(self, datatype):
        """The same memory seen as elements of ``datatype`` (of the same extent)."""
        return Message(self.buf, self.obj, self.address, self.count, datatype, self.extent, self.memory)

    def part(self, offset, count):
        """A spec of ``count`` elements from element ``offset`` (``region``)."""
        return region(self.address + offset * self.extent, count, self.datatype, self.extent)


def region(address, count, datatype, extent):
    """The one buffer-spec builder: ``[buffer, count, datatype]`` of ``count`` elements at
    ``address``, in any memory (MPI gets the pointer)."""
    return [MPI.buffer.fromaddress(address, count * extent), count, datatype]


def is_in_place(sendbuf) -> bool:
    return sendbuf is None or sendbuf is MPI.IN_PLACE


def check_op_type(op):
    if not isinstance(op, MPI.Op):
        raise TypeError(f"Argument 'op' has incorrect type (expected mpi4py.MPI.Op, got {type(op).__name__})")


def messages(sendbuf, recvbuf, op):
    """(in_place, send Message, receive Message) of ``comm.Allreduce(sendbuf, recvbuf, op)``;
    raises what mpi4py raises for a bad spec.  In place, the send Message is the receive one."""
    check_op_type(op)
    out = resolve(recvbuf, readonly=False)
    if is_in_place(sendbuf):
        return True, out, out
    src = resolve(sendbuf, readonly=True)
    if src.datatype.handle != out.datatype.handle:
        raise ValueError("mismatch in send and receive MPI datatypes")
    if src.count != out.count:
        raise ValueError(f"mismatch in send count {src.count} and receive count {out.count}")
    return False, src, out


def resolve(spec, readonly: bool) -> Message:
    """The Message of one buffer spec (mpi4py's ``message_simple``)."""
    obj, o_count, o_displ, o_type = split(spec)
    memory, device = "host", None
    if obj is None or obj is MPI.BOTTOM:
        buf, address, length = None, 0, 0          # MPI_BOTTOM
        datatype = _as_datatype(o_type)
    else:
        # A device array is checked on a host stand-in of the same layout (same errors).
        device = _cuda.describe_device(obj)
        layout = obj if device is None else device.standin()
        buf = _export(layout, readonly)
        address, length = buf.address, buf.nbytes
        if device is not None:
            address, memory = device.ptr + (address - layout.ctypes.data), device.memory
        datatype = _as_datatype(o_type) if o_type is not None else _format_datatype(layout)
    displ, extent = 0, None
    if o_displ is not None:
        displ = operator.index(o_displ)
        if displ < 0:
            raise ValueError(f"message: negative displacement {displ}")
        if displ > 0:
            lb, extent = _extent(datatype, "handle displacement")
            if displ * extent > length:
                raise ValueError(f"message: displacement {displ} out of bounds, "
                                 f"number of datatype entries {length // extent}")
            address, length = address + displ * extent, length - displ * extent
    count = _count(o_count, obj, length, datatype, extent)
    if extent is None:
        extent = datatype.Get_extent()[1] if datatype != MPI.DATATYPE_NULL else 0
    return Message(buf, obj, address, count, datatype, extent, memory)


def split(spec):
    """(buffer, count, displacement, datatype) of a spec, each None when not given."""
    if not isinstance(spec, (list, tuple)):
        if not _is_buffer_like(spec):
            raise TypeError("message: expecting buffer or list/tuple")
        return spec, None, None, None
    o_count = o_displ = o_type = None
    if len(spec) == 2:
        obj, o_count = spec
        if isinstance(o_count, (MPI.Datatype, str)):
            o_count, o_type = None, o_count
        elif isinstance(o_count, (list, tuple)):
            o_count, o_displ = o_count
    elif len(spec) == 3:
        obj, o_count, o_type = spec
        if isinstance(o_count, (list, tuple)):
            o_count, o_displ = o_count
    elif len(spec) == 4:
        obj, o_count, o_displ, o_type = spec
    else:
        raise ValueError("message: expecting 2 to 4 items")
    return obj, o_count, o_displ, o_type


def _count(o_count, obj, length, datatype, extent):
    if o_count is not None:
        count = operator.index(o_count)
        if count < 0:
            raise ValueError(f"message: negative count {count}")
        if count > 0 and obj is None:
            raise ValueError(f"message: buffer is None but count is {count}")
        return count
    if length == 0:
        return 0
    if extent is None:
        lb, extent = _extent(datatype, "infer count")
    else:
        lb = datatype.Get_extent()[0]
    if length % extent:
        raise ValueError(f"message: cannot infer count, buffer length {length} is not a multiple "
                         f"of datatype extent {extent} (lb:{lb}, ub:{lb + extent})")
    return length // extent


def _extent(datatype, what):
    if datatype == MPI.DATATYPE_NULL:
        raise ValueError(f"message: cannot {what}, datatype is null")
    lb, extent = datatype.Get_extent()
    if extent <= 0:
        raise ValueError(f"message: cannot {what}, datatype extent {extent} (lb:{lb}, ub:{lb + extent})")
    return lb, extent


def _is_buffer_like(obj):
    return (hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")
            or _has_buffer(obj))


def _has_buffer(obj):
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    except (BufferError, ValueError):
        return True
    return True


def _export(obj, readonly):
    buf = MPI.buffer(obj)
    if not readonly and buf.readonly:
        raise BufferError("Object is not writable.")
    return buf


def _as_datatype(o_type):
    if isinstance(o_type, MPI.Datatype):
        return o_type
    return _lookup(o_type)


def _lookup(key):
    try:
        return MPI._typedict[key]
    except (KeyError, TypeError):
        raise KeyError(f"cannot map {key!r} to MPI datatype") from None


def _format_datatype(obj):
    """The datatype of a buffer's own format, as mpi4py maps it ("B" is MPI.BYTE)."""
    fmt = buffer_format(obj)
    if fmt == _BYTE_FORMAT:
        return MPI.BYTE
    order = fmt[:1]
    if order in ("<", ">") and (order == "<") != _LITTLE:
        raise BufferError(f"format string {fmt!r} with non-native byte order")
    return _lookup(fmt[1:] if order in ("@", "<", ">") else fmt)


_LITTLE = sys.byteorder == "little"


def buffer_format(obj) -> str:
    """The struct format of a buffer (its dtype's for DLPack or CUDA arrays)."""
    try:
        with memoryview(obj) as view:
            return view.format
    except TypeError:
        pass
    cai = getattr(obj, "__cuda_array_interface__", None)
    dtype = cai["typestr"] if cai is not None else getattr(obj, "dtype", None)
    if dtype is None:
        return _BYTE_FORMAT
    import numpy as np
    return np.dtype(dtype).char
