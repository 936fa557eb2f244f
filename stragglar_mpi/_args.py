"""The arguments of one ``Allreduce`` call, checked; and the repeat of the last call's.

A training loop passes the same buffers with the same op every step.  ``keep``
makes a compiled ``_fast.Repeat`` of what the checks of one call found; the next
call that passes the same arguments again reuses it (see cython_src/_fast.pyx).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import _config
from ._buffers import Message, is_in_place, resolve, validate
from ._policy import POLICIES
from ._state import KEYVAL

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
                 _type_name(out.datatype), _op_name(op))
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


# Handles are per-process addresses in Open MPI, so ranks compare predefined ops by name.
_OP_NAMES = {getattr(MPI, n).handle: n for n in
             ("MAX", "MIN", "SUM", "PROD", "LAND", "BAND", "LOR", "BOR", "LXOR", "BXOR",
              "MAXLOC", "MINLOC", "REPLACE", "NO_OP")}


def _op_name(op):
    return _OP_NAMES.get(op.handle, "predefined") if op.is_predefined else "user-defined"


def _type_name(datatype):
    try:
        return datatype.tocode()
    except Exception:
        return datatype.Get_name() or "derived"


def keep(args, straggler, algorithm, settings):
    """A compiled ``_fast.Repeat`` of a checked call whose buffers are NumPy arrays and
    whose op is predefined; None for other calls (checked in full every time) or
    without the extension."""
    if (_fast is None or not isinstance(args.recvbuf, np.ndarray) or not args.op.is_predefined
            or not (args.in_place or isinstance(args.sendbuf, np.ndarray))):
        return None
    kept = Args(args.n, args.policy, None, None, args.op, args.in_place,
                _unbound(args.out), _unbound(args.src), args.name, args.signature)
    native = args.name == "native" and settings.timeout is None
    return _fast.Repeat(args, kept, straggler, algorithm, native)


def _unbound(msg):
    return Message(None, None, None, msg.count, msg.datatype, msg.extent)


def _no_native_repeat(*args):
    return False


# The settings a repeat depends on, in the order _fast compares them.
_REPEAT_SETTINGS = ("STRAGGLAR_ALGO", "STRAGGLAR_AUTO_MIN_BYTES", "STRAGGLAR_TIMEOUT", "STRAGGLAR_VALIDATE")
try:
    from . import _fast
except ImportError:   # a source checkout without the build: every call is checked in full
    _fast = None
if _fast is not None and _config.RAW_ENVIRON is not None:
    _fast.init(_config.RAW_ENVIRON, [k.encode() for k in _REPEAT_SETTINGS], KEYVAL, Args, Message)
    run_native = _fast.run_native
else:
    _fast, run_native = None, _no_native_repeat
