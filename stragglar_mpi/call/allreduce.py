"""``Allreduce``: check, pick an algorithm, run phase 1 and the per-rank plan."""
from __future__ import annotations

from collections import Counter
import json

import numpy as np
from mpi4py import MPI

from ..core import config as _config
from ..memory import device as _device
from ..core import features as _features
from ..run import hierarchical as _hierarchical
from ..run import staged as _staged
from ..run import transport as _transport
from ..bind.args import check
from ..memory.buffers import Message
from ..core.errors import Mismatch, Pending, StragglerTimeout
from ..memory.host import _KEPT, HOST
from ..run.phases import exactly_commutative as _exactly_commutative
from ..run.phases import plan_of as _plan
from ..run.phases import region, start_phase1, wait as _wait, wait_all as _wait_all
from ..decide.policy import SAMPLE_FIRST, SAMPLE_MAX, auto_algorithm, predict_straggler
from .report import log_of
from ..core.state import KEYVAL, peek, state_of
from ..schedule import PHASE1, chunk_bounds

PHASE1_ROLES = ("stragglar", "direct", "hierarchical")
_MEMORY = {"host": HOST, "device": _device.DEVICE}


def Allreduce(comm, sendbuf, recvbuf, op=MPI.SUM, *, straggler=None, algorithm=None):
    """Drop-in for ``comm.Allreduce(sendbuf, recvbuf, op)``.

    ``straggler``: who plays the straggler: a rank; "arrival" (the last rank to
    call, found at run time; the default); or "predict" (the rank that came
    last most often in recent calls, found without waiting).
    ``algorithm``: "auto" (default: native for small buffers or no delay,
    StragglAR when the observed delay pays), "stragglar", "hierarchical" (StragglAR
    on two tiers, for communicators that span nodes), "ring", "rhd", "direct" or
    "native"; the STRAGGLAR_ALGO environment variable overrides it.
    Non-commutative ops, pair types (MAXLOC/MINLOC), derived datatypes and a
    single rank always take the native path.
    With STRAGGLAR_TIMEOUT set, a call that waits longer raises
    ``StragglerTimeout`` on every waiting rank; with STRAGGLAR_VALIDATE=1 every
    rank checks that all ranks passed the same arguments.
    """
    _call(comm, sendbuf, recvbuf, op, straggler, algorithm)


def _call(comm, sendbuf, recvbuf, op, straggler, algorithm):
    """A call checked in full (a miss of the compiled entry); returns its Args when a
    repeat of it may reuse them, else None."""
    t_call = MPI.Wtime()
    settings = _config.current()
    deadline = t_call + settings.timeout if settings.timeout else 0.0
    try:
        if not _supported(comm):
            _plain(comm, sendbuf, recvbuf, op)
            return None
        checked = lambda: check(comm, sendbuf, recvbuf, op, straggler, algorithm, settings)  # noqa: E731
        args = _same_everywhere(comm, checked, deadline) if settings.validate else checked()
        _run_checked(comm, state_of(comm, deadline), args, settings, t_call, deadline)
    except (Pending, Mismatch) as exc:
        raise _failed(peek(comm), exc, settings.timeout) from None
    return None if settings.validate else args


def _run_bound(comm, state, args):
    """A repeat whose decision is not a native call from C (the compiled entry bound it)."""
    t_call = MPI.Wtime()
    settings = _config.current()
    deadline = t_call + settings.timeout if settings.timeout else 0.0
    try:
        _run_checked(comm, state, args, settings, t_call, deadline)
    except (Pending, Mismatch) as exc:
        raise _failed(state, exc, settings.timeout) from None


def _run_checked(comm, state, args, settings, t_call, deadline):
    if state.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {state.broken}")
    _run(comm, state, args, settings, t_call, deadline)


def _supported(comm):
    """Intracommunicators only; an intercommunicator (or any other kind) runs natively."""
    return isinstance(comm, MPI.Intracomm) and not comm.Is_inter()


def _plain(comm, sendbuf, recvbuf, op):
    """mpi4py's own ``Allreduce`` on a communicator the library does not handle."""
    MPI.Comm.Allreduce(comm, MPI.IN_PLACE if sendbuf is None else sendbuf, recvbuf, op)


def _run(comm, state, args, settings, t_call, deadline):
    name, straggler, seq = args.name, None, state.tracked_seq
    if name != "native" or deadline:
        name, straggler = _roles(state, name, args.policy, args.out.count * args.out.extent,
                                 args.n, tracked=bool(deadline), deadline=deadline)
    if name == "hierarchical" and not _hierarchical.applies(state.topology, straggler):
        name = "stragglar"     # one node, a rank per node, S alone on its node: flat
    if name == "hierarchical" and args.route == "device":
        # Its phase 1 folds with MPI_Reduce_local in host scratch: device pointers are
        # staged, so that every rank runs the same algorithm whatever its memory.
        args = args.via("staged")
    transport = None if name == "native" else _transport.name(settings)
    t_p1, first = _execute(comm, state, name, straggler, args, transport, deadline)
    t_end = MPI.Wtime()
    _record(state, name, straggler, args.policy, t_call, t_p1 or t_call, first, t_end, transport,
            args.route)
    if state.tracked_seq != seq:      # a tracked call: the straggler report keeps what ran
        post = t_end - (first if first is not None else t_call)
        log_of(state, args.n, comm.Get_name()).ran(state.tracked_seq, name, straggler,
                                                   args.out.count * args.out.extent, post)


def _execute(comm, state, name, straggler, args, transport, deadline, staging=None):
    """Phase 1 and the plan (or the native call) in the call's memory; returns (end of
    phase 1 or None, first receive or None).  Staged, they run in host memory."""
    if args.route == "staged":
        with _staged.Staging(state, args, whole=name not in _staged.PIPELINED) as staged:
            return _execute(comm, state, name, straggler, staged.args, transport, deadline, staged)
    if name == "native":
        _native(comm, state, args, deadline)
        return None, None
    if name == "hierarchical":
        commutative = _exactly_commutative(args.op, args.out.datatype)
        return _hierarchical.run(state, straggler, args, transport, deadline, _wait_all, commutative)
    return _run_schedule(state, name, straggler, args, transport, deadline, _MEMORY[args.route], staging)


def _native(comm, state, args, deadline):
    if not deadline:
        for sendbuf, recvbuf in _native_pieces(args):
            MPI.Intracomm.Allreduce(comm, sendbuf, recvbuf, args.op)
        return
    if not args.out.datatype.is_predefined:
        sendbuf, recvbuf = _specs(args)
        request = MPI.Intracomm.Iallreduce(state.private, sendbuf, recvbuf, args.op)
        _wait(request, deadline, "the native AllReduce")
        return
    _native_on_scratch(state, args, deadline)


def _specs(args):
    """(send, receive) specs of the whole call: the caller's own for host memory."""
    if args.route == "host":
        return MPI.IN_PLACE if args.in_place else args.sendbuf, args.recvbuf
    send = MPI.IN_PLACE if args.in_place else _region(args.src, 0, args.src.count)
    return send, _region(args.out, 0, args.out.count)


def _native_pieces(args):
    """The call's buffers, or on MPI-3.1 above INT_MAX elements pieces that it accepts."""
    cuts = _features.pieces(args.out.count)
    if len(cuts) == 1:
        return [_specs(args)]
    return [(MPI.IN_PLACE if args.in_place else _region(args.src, start, length), _region(args.out, start, length))
            for start, length in cuts]


def _native_on_scratch(state, args, deadline):
    """Under a deadline MPI works on scratch memory, copied out on success: after a
    timeout, the request that cannot be cancelled writes there, not into the caller's buffer."""
    out, src, memory = args.out, args.src, _MEMORY[args.route]
    nbytes, dt = out.count * out.extent, out.datatype
    holes = dt.Get_size() != out.extent       # pair types: keep the caller's padding
    with memory.lease(state) as lease:
        scratch = memory.scratch(lease, 2 * nbytes if holes and not args.in_place else nbytes)
        memory.copy(scratch, (out if holes else src).address, nbytes)
        send = MPI.IN_PLACE
        if holes and not args.in_place:
            send = region(scratch + nbytes, out.count, dt, out.extent)
            memory.copy(scratch + nbytes, src.address, nbytes)
        request = MPI.Intracomm.Iallreduce(state.private, send, region(scratch, out.count, dt, out.extent),
                                           args.op)
        _wait(request, deadline, "the native AllReduce")
        memory.copy(out.address, scratch, nbytes)


def _failed(state, exc, timeout):
    """The error for a call that cannot complete; marks the communicator's state unusable."""
    if state is not None and state.bindings is not None:
        state.bindings.clear()      # a broken state is never reached from the compiled entry
    if isinstance(exc, Mismatch):
        if state is not None:
            state.broken = str(exc)
        return exc
    return _timed_out(state, exc, timeout)


def _timed_out(state, pending, timeout):
    """The StragglerTimeout of a ``Pending`` on this rank."""
    phase = pending.phase or "phase 2 (the round schedule)"
    missing = list(pending.missing) if pending.missing is not None else state.absent_ranks()
    if missing:
        who = f"rank(s) {', '.join(map(str, missing))} did not arrive"
    elif pending.peers:
        who = f"no message came from rank(s) {', '.join(map(str, pending.peers))}"
    else:
        who = "every rank arrived, so the others may have given up waiting for this one (see their errors)"
    message = (f"stragglar_mpi: Allreduce timed out after {timeout:g} s in {phase}: {who}. "
               "This communicator's library state is now unusable; abort the job (comm.Abort()).")
    state.broken = message
    _KEPT.append(state.scratch(0))
    return StragglerTimeout(message, missing=missing, phase=phase, peers=pending.peers)


def _same_everywhere(comm, check, deadline):
    """Run ``check`` on every rank and compare the results; raise the same error everywhere.

    Whatever ``check`` raises on one rank, that rank still takes part in the exchange,
    so no rank is left waiting."""
    try:
        args, error = check(), None
    except Exception as exc:      # any type: mpi4py raises KeyError for some specs
        args, error = None, exc
    state = state_of(comm, deadline)
    mine = ["error", _describe(error)] if error is not None else list(args.signature)
    everyone = _allgather_values(state, mine, deadline)
    problem = _mismatch(everyone)
    if error is not None:
        raise error
    if problem:
        raise ValueError(f"stragglar_mpi: Allreduce arguments differ across ranks: {problem}")
    return args


def _describe(error):
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:
        return type(error).__name__


_SLOT = 256   # bytes per rank in the first exchange: an 8-byte length, then the text if it fits


def _allgather_values(state, value, deadline):
    """Every rank's ``value`` (JSON), in rank order: a fixed-size exchange, and one of the
    full texts only when one does not fit (any length)."""
    comm = state.private
    n, text = comm.Get_size(), json.dumps(value).encode()
    head = np.zeros(_SLOT, np.uint8)
    head[:8] = np.frombuffer(np.int64(len(text)).tobytes(), np.uint8)
    head[8:8 + len(text)] = np.frombuffer(text[:_SLOT - 8], np.uint8)
    heads = _allgather(comm, head, [_SLOT] * n, deadline)
    lengths = [int(np.frombuffer(bytes(h[:8]), np.int64)[0]) for h in heads]
    if max(lengths) <= _SLOT - 8:
        texts = [bytes(h[8:8 + k]) for h, k in zip(heads, lengths)]
    else:
        texts = [bytes(t) for t in _allgather(comm, np.frombuffer(text, np.uint8), lengths, deadline)]
    return [json.loads(t) for t in texts]


def _allgather(comm, mine, sizes, deadline):
    """Every rank's bytes (``sizes[r]`` from rank r).  Under a deadline the exchange is
    point to point, so that a rank that does not come is named."""
    n, rank, phase = comm.Get_size(), comm.Get_rank(), "the argument check (STRAGGLAR_VALIDATE)"
    if not deadline:
        whole = np.empty(sum(sizes), np.uint8)
        _wait(comm.Iallgatherv(mine, [whole, sizes]), 0.0, phase)
        return np.split(whole, np.cumsum(sizes)[:-1])
    got = [np.empty(k, np.uint8) for k in sizes]
    got[rank][:] = mine
    others = [r for r in range(n) if r != rank]
    tag = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) - 1     # the setup's tag is TAG_UB, rounds' < 32768
    recvs = [comm.Irecv(got[r], r, tag) for r in others]
    sends = [comm.Isend(mine, r, tag) for r in others]
    if not _transport.wait(recvs + sends, deadline):
        missing = [r for r, live in zip(others, _transport.unanswered(recvs)) if live]
        _transport.cancel(recvs + sends, mine, got)
        raise Pending(missing, phase, missing=missing)
    return got


_FIELDS = ("algorithm", "straggler", "in place", "count", "datatype size", "datatype", "op")


def _mismatch(everyone):
    """A readable account of what differs, naming the ranks; '' when all agree."""
    errors = [f"rank {r}: {v[1]}" for r, v in enumerate(everyone) if v[0] == "error"]
    if errors:
        return "bad arguments on " + "; ".join(errors)
    parts = []
    for i, field in enumerate(_FIELDS):
        seen = {}
        for rank, v in enumerate(everyone):
            seen.setdefault(v[i], []).append(rank)
        if len(seen) > 1:
            show = str if field == "op" else repr
            groups = "; ".join(f"ranks {_ranges(r)}: {show(val)}" for val, r in seen.items())
            parts.append(f"{field} ({groups})")
    return ", ".join(parts)


def _ranges(ranks):
    return ",".join(map(str, ranks)) if len(ranks) < 6 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"


def _roles(state, name, policy, nbytes, n, tracked=False, deadline=0.0):
    """(algorithm, straggler) for this call, the same on every rank.

    Calls that need arrival data ("auto", a policy by name, or a timeout that
    must name the missing ranks) send arrival notices (_arrival); the others
    touch nothing.
    """
    needs_roles = name == "auto" or (name in PHASE1_ROLES and isinstance(policy, str))
    if not (needs_roles or (tracked and n > 1)):
        return name, (policy if name in PHASE1_ROLES else None)
    if name == "auto" and not tracked and not _sampled(state, n, nbytes):
        return "native", None
    arrivals = state.arrivals()
    if arrivals.arrive(deadline) is None:
        raise _timed_out(state, "the arrival notices of the previous call", None, ())
    state.tracked_seq = arrivals.seq
    previous = arrivals.previous()
    if previous is not None:
        state.history.append(previous)
        if state.log is not None:
            state.log.arrived(arrivals.seq - 1, previous)
    try:
        if name == "auto":
            name = auto_algorithm(state.history, n, nbytes, state.tiers())
        if name not in PHASE1_ROLES:
            return name, None
        if policy == "predict":
            return name, predict_straggler(state.history, n)
        if policy != "arrival":
            return name, policy
        straggler = arrivals.straggler(deadline)
        if straggler is None:
            raise Pending((), "the arrival of the early ranks")
        return name, straggler
    finally:
        arrivals.finish()


def _sampled(state, n, nbytes):
    """Whether an "auto" call reads and writes the arrival table.

    Calls are recorded in pairs (each record costs two RMA round trips; the second
    call of a pair reads the first one's record).  While the records say native,
    the pairs thin out: the gap between them starts at SAMPLE_FIRST calls and
    doubles up to SAMPLE_MAX.  Once the newest record shows a delay that would pay,
    every call is recorded until the history decides, and the gap starts over.
    Every rank counts the same calls and reads the same records, so all agree.
    """
    state.auto_calls += 1
    calls, history = state.auto_calls, state.history
    tiers = state.tiers()
    if not history or (auto_algorithm([history[-1]], n, nbytes, tiers) != "native"
                       or auto_algorithm(history, n, nbytes, tiers) != "native"):
        state.next_pair, state.pair_gap = calls + SAMPLE_FIRST, SAMPLE_FIRST
        return True
    if calls == state.next_pair + 1:
        state.next_pair += state.pair_gap
        state.pair_gap = min(2 * state.pair_gap, SAMPLE_MAX)
        return True
    return calls == state.next_pair


def _run_schedule(state, name, straggler, args, transport, deadline, memory, staging=None):
    """Phase 1 on the early ranks, then this rank's plan, in ``memory`` (a backend);
    ``staging`` (_staged): told the plan, and when each of its rounds starts."""
    comm, out, src = state.private, args.out, args.src
    dt, extent = out.datatype, out.extent
    rank, n = comm.Get_rank(), comm.Get_size()
    chunks, plan = _plan(name, n, straggler, rank, out.count, extent, args.in_place,
                         _exactly_commutative(args.op, dt), dt.handle)
    scratch_bytes = plan.scratch_bytes
    kind = PHASE1.get(name)
    sub = state.early_comm(straggler, deadline) if kind else None  # every rank: same LRU order
    staged = bool(deadline)    # after a timeout MPI writes scratch, never the caller's buffer
    bounds = chunk_bounds(out.count, chunks) if sub is not None else None
    if sub is not None and (staged or args.in_place):
        phase1_count = out.count if kind == "allreduce" else max(b[1] for b in bounds)
        scratch_bytes = max(scratch_bytes, phase1_count * extent)
    if staging is not None:
        staging.start(plan, chunks, early=sub is not None)
    with memory.lease(state) as lease:
        scratch = memory.scratch(lease, scratch_bytes)
        if sub is not None:
            started = start_phase1(sub, kind, bounds, src, out, args.in_place, args.op, scratch, staged)
            _wait(started.request, deadline, f"phase 1 ({kind} among the early ranks)",
                  [r for r in range(n) if r not in (rank, straggler)])
            started.finish(memory)
        t_p1 = MPI.Wtime()
        addresses = (src.address, out.address, scratch)
        first = _transport.execute(plan, addresses, comm, dt, args.op, transport, deadline,
                                   memory.local(dt, args.op), staging)
    return t_p1, first


def _region(msg, offset, count):
    """A [buffer, count, datatype] spec of ``count`` elements at element ``offset``."""
    return region(msg.address + offset * msg.extent, count, msg.datatype, msg.extent)


def _record(state, name, straggler, policy, t_call, t_p1, first, t_end, transport, memory="host"):
    state.calls[name] += 1
    state.last = (name, straggler, policy, t_call, t_p1, first, t_end, transport, memory)
    if state.bindings is not None:
        state.bindings.last_was_hit = False


def _last(name, straggler, policy, t_call, t_p1, first, t_end, transport, memory):
    arrived = first if first is not None else t_p1
    return {
        "algorithm": name,
        "straggler": straggler,
        "policy": policy if name in PHASE1_ROLES else None,
        "transport": transport,
        "memory": memory,
        "reduce_scatter": t_p1 - t_call,
        "wait": arrived - t_p1,
        "post_arrival": t_end - arrived,
        "total": t_end - t_call,
    }


def stats(comm) -> dict:
    """Per-communicator counters: ``calls`` (algorithm -> count) and ``last`` (the last call).

    Local: it reads what this rank recorded and never communicates (before the first
    call on ``comm`` it is empty)."""
    state = peek(comm)
    if state is None:
        return {"calls": {}, "last": {}}
    calls, last, bindings = Counter(state.calls), state.last, state.bindings
    if bindings is not None and bindings.native_calls:
        calls["native"] += bindings.native_calls
        if bindings.last_was_hit:
            last = ("native", None, bindings.policy, bindings.t_call, bindings.t_call, None,
                    bindings.t_end, None, "host")
    return {"calls": dict(calls), "last": _last(*last) if last else {}}


def last_end(comm) -> float:
    """MPI_Wtime at which the last call recorded on ``comm`` returned (0.0: none yet);
    ``_requests.stats`` compares it with the nonblocking calls' end."""
    state = peek(comm)
    if state is None:
        return 0.0
    if state.bindings is not None and state.bindings.last_was_hit:
        return state.bindings.t_end
    return state.last[6] if state.last else 0.0


try:
    from . import _entry as _bind
except ImportError:   # a source checkout without the build: every call is checked in full
    _bind = None
else:
    _bind.init(KEYVAL, _call, _run_bound, Message)
    _config.on_configure(_bind.set_epoch)
    _bind.Allreduce.__doc__ = Allreduce.__doc__
    Allreduce = _bind.Allreduce  # noqa: F811
