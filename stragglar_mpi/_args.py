"""The arguments of one ``Allreduce`` call, checked; and the repeat of the last call's.

A training loop passes the same buffers with the same op every step.  ``Repeat``
keeps what the checks of one call found (the algorithm, count, datatype) and
hands it to the next call that passes arrays of the same type over the same
memory, with the same dtype and writability, and the same other arguments and
settings: every check would give the same answer, so only the buffers' exports
are taken anew.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import _config
from ._buffers import Message, is_in_place, resolve, validate
from ._policy import POLICIES

_PAIR_TYPES = {getattr(MPI, n).handle for n in
               ("FLOAT_INT", "DOUBLE_INT", "LONG_INT", "SHORT_INT", "LONG_DOUBLE_INT", "TWOINT", "INT_INT")
               if getattr(MPI, n, MPI.DATATYPE_NULL) != MPI.DATATYPE_NULL}


class Args:
    """The checked arguments of one call."""

    __slots__ = ("n", "policy", "sendbuf", "recvbuf", "op", "in_place", "out", "src", "name",
                 "signature")

    def __init__(self, n, policy, sendbuf, recvbuf, op, in_place, out, src, name, signature):
        self.n, self.policy, self.op, self.in_place = n, policy, op, in_place
        self.sendbuf, self.recvbuf, self.out, self.src = sendbuf, recvbuf, out, src
        self.name, self.signature = name, signature


def check(comm, sendbuf, recvbuf, op, straggler, algorithm, settings) -> Args:
    """Check every argument; raise what mpi4py raises for a bad buffer or op."""
    requested = _config.algorithm(algorithm, settings)
    n = comm.Get_size()
    policy = check_straggler(straggler, n)
    validate(sendbuf, recvbuf, op)
    in_place = is_in_place(sendbuf)
    out = resolve(recvbuf, readonly=False)
    src = out if in_place else resolve(sendbuf, readonly=True)
    name = decide(requested, n, out, op, settings)
    if name != "native":
        check_op(op, out.datatype)
    signature = (requested, str(policy), in_place, out.count, out.datatype.Get_size(),
                 _type_name(out.datatype), op.handle if op.is_predefined else -1)
    return Args(n, policy, sendbuf, recvbuf, op, in_place, out, src, name, signature)


def check_straggler(straggler, n):
    """The role policy: a rank, "arrival" or "predict" (None means "arrival")."""
    if straggler is None:
        return "arrival"
    if isinstance(straggler, str):
        if straggler not in POLICIES:
            raise ValueError(f"straggler must be a rank, 'arrival' or 'predict'; got {straggler!r}")
        return straggler
    if isinstance(straggler, (bool, np.bool_)) or not isinstance(straggler, (int, np.integer)):
        raise TypeError(f"straggler must be a rank (int), 'arrival', 'predict' or None, "
                        f"not {type(straggler).__name__}")
    if not 0 <= straggler < n:
        raise ValueError(f"straggler {straggler} is not a rank of a communicator of size {n}")
    return int(straggler)


def decide(name, n, out, op, settings=None):
    """The algorithm that will run; every rank reaches the same answer from the same arguments."""
    dt = out.datatype
    if (n == 1 or out.count == 0 or not op.Is_commutative() or dt.handle in _PAIR_TYPES
            or not dt.is_predefined or dt.Get_size() != dt.Get_extent()[1]):
        return "native"
    if name == "auto" and out.count * dt.Get_size() < (settings or _config.current()).auto_min_bytes:
        return "native"
    return name


_OP_ACCEPTS = set()


def check_op(op, datatype):
    """Raise MPI's error for an op that does not apply to the datatype, before any message."""
    key = (op.handle, datatype.handle)
    if not op.is_predefined or key in _OP_ACCEPTS:
        return
    extent = datatype.Get_extent()[1]
    a, b = bytearray(extent), bytearray(extent)
    op.Reduce_local([a, 1, datatype], [b, 1, datatype])
    _OP_ACCEPTS.add(key)


def _type_name(datatype):
    try:
        return datatype.tocode()
    except Exception:
        return datatype.Get_name() or "derived"


class Repeat:
    """The last call's checks, for a call that passes the same arguments again."""

    __slots__ = ("in_place", "op", "key", "layout", "args")

    def __init__(self, in_place, op, key, layout, args):
        self.in_place, self.op, self.key, self.layout, self.args = in_place, op, key, layout, args

    @classmethod
    def of(cls, args, straggler, algorithm, settings):
        """A Repeat of ``args`` when its buffers are NumPy arrays and its op is predefined
        (other arguments are checked in every call), else None."""
        if (not isinstance(args.recvbuf, np.ndarray) or not args.op.is_predefined
                or not (args.in_place or isinstance(args.sendbuf, np.ndarray))):
            return None
        layout = (_layout(args.out.buf, args.recvbuf),
                  None if args.in_place else _layout(args.src.buf, args.sendbuf))
        kept = Args(args.n, args.policy, None, None, args.op, args.in_place,
                    _unbound(args.out), _unbound(args.src), args.name, args.signature)
        return cls(args.in_place, args.op, _key(straggler, algorithm, settings), layout, kept)

    def match(self, sendbuf, recvbuf, op, straggler, algorithm, settings):
        """This call's Args if it repeats the kept call, else None."""
        if op is not self.op or is_in_place(sendbuf) != self.in_place:
            return None
        if self.key != _key(straggler, algorithm, settings):
            return None
        try:
            rbuf = MPI.buffer(recvbuf)
            sbuf = None if self.in_place else MPI.buffer(sendbuf)
        except (TypeError, ValueError, BufferError):
            return None        # the full check raises the error a first call gets
        if (_layout(rbuf, recvbuf), None if sbuf is None else _layout(sbuf, sendbuf)) != self.layout:
            return None
        k = self.args
        out = _bound(k.out, rbuf, recvbuf)
        src = out if sbuf is None else _bound(k.src, sbuf, sendbuf)
        return Args(k.n, k.policy, sendbuf, recvbuf, op, k.in_place, out, src, k.name, k.signature)


def _key(straggler, algorithm, settings):
    # Of the settings, only these change what the checks find.
    return (type(straggler), straggler, type(algorithm), algorithm, settings.algo,
            settings.auto_min_bytes)


def _layout(buf, array):
    # Two arrays of one type with this layout resolve to the same message (a new view
    # of the same memory each step is the common case); an array's dtype, unlike
    # its buffer's format here, names the datatype.
    return (type(array), buf.address, buf.nbytes, buf.readonly, getattr(array, "dtype", None))


def _unbound(msg):
    return Message(None, None, None, msg.count, msg.datatype, msg.extent)


def _bound(kept, buf, obj):
    return Message(buf, obj, buf.address, kept.count, kept.datatype, kept.extent)
