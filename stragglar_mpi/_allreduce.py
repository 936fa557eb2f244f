"""``Allreduce``: check, pick an algorithm, run phase 1 and the per-rank plan."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from mpi4py import MPI

from . import _config, _device, _hierarchical, _transport
from ._args import check, keep, run_native
from ._errors import Pending, StragglerTimeout
from ._plan import compile_rounds
from ._policy import SAMPLE_FIRST, SAMPLE_MAX, auto_algorithm, predict_straggler
from ._state import peek, state_of
from .schedule import PHASE1, chunk_bounds, rank_view

_ORDERED_FLOAT_OPS = {MPI.MAX.handle, MPI.MIN.handle}
PHASE1_ROLES = ("stragglar", "direct", "hierarchical")


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
    if run_native(comm, sendbuf, recvbuf, op, straggler, algorithm):
        return
    t_call = MPI.Wtime()
    settings = _config.current()
    deadline = t_call + settings.timeout if settings.timeout else 0.0
    state = peek(comm)
    args = None
    if state is not None and state.repeat is not None and not settings.validate:
        args = state.repeat.match(sendbuf, recvbuf, op, straggler, algorithm)
    if args is None:
        if _device.is_device_call(sendbuf, recvbuf):
            return _device.allreduce(comm, sendbuf, recvbuf, op, straggler=straggler, algorithm=algorithm)
        args = _checked(comm, sendbuf, recvbuf, op, straggler, algorithm, settings, deadline)
        state = state_of(comm)
    if state.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {state.broken}")
    try:
        _run(comm, state, args, settings, t_call, deadline)
    except Pending as exc:
        raise _timed_out(state, "phase 2 (the round schedule)", settings.timeout, exc.peers) from None


def _checked(comm, sendbuf, recvbuf, op, straggler, algorithm, settings, deadline):
    """Check every argument (on every rank alike with STRAGGLAR_VALIDATE); keep the
    result for a call that repeats these arguments."""
    checked = lambda: check(comm, sendbuf, recvbuf, op, straggler, algorithm, settings)  # noqa: E731
    if settings.validate:
        return _same_everywhere(comm, checked, deadline)
    args = checked()
    state_of(comm).repeat = keep(args, straggler, algorithm, settings)
    return args


def _run(comm, state, args, settings, t_call, deadline):
    name, straggler = args.name, None
    if name != "native" or deadline:
        name, straggler = _roles(state, name, args.policy, args.out.count * args.out.extent,
                                 args.n, tracked=bool(deadline), deadline=deadline)
    if name == "native":
        _native(comm, state, args, deadline)
        _record(state, name, None, args.policy, t_call, t_call, None, MPI.Wtime(), None)
        return
    transport = _transport.name(settings)
    if name == "hierarchical" and not _hierarchical.applies(state.topology, straggler):
        name = "stragglar"     # one node, a rank per node, or S alone on its node: flat
    if name == "hierarchical":
        commutative = _exactly_commutative(args.op, args.out.datatype)
        t_p1, first = _hierarchical.run(state, straggler, args, transport, deadline,
                                        lambda reqs, dl, phase: _wait_all(state, reqs, dl, phase),
                                        commutative)
    else:
        t_p1, first = _run_schedule(state, name, straggler, args, transport, deadline)
    _record(state, name, straggler, args.policy, t_call, t_p1, first, MPI.Wtime(), transport)


def _native(comm, state, args, deadline):
    sendbuf = MPI.IN_PLACE if args.in_place else args.sendbuf
    if not deadline:
        MPI.Intracomm.Allreduce(comm, sendbuf, args.recvbuf, args.op)
        return
    request = MPI.Intracomm.Iallreduce(state.private, sendbuf, args.recvbuf, args.op)
    _wait(state, request, deadline, "the native AllReduce")


def _wait(state, request, deadline, phase):
    _wait_all(state, [request], deadline, phase)


def _wait_all(state, requests, deadline, phase):
    if not _transport.wait(requests, deadline):
        raise _timed_out(state, phase, None, ())


def _timed_out(state, phase, timeout, peers):
    """The StragglerTimeout for this rank; marks the communicator's state unusable."""
    missing = state.absent_ranks()
    who = (f"rank(s) {', '.join(map(str, missing))} did not arrive" if missing
           else f"no message came from rank(s) {', '.join(map(str, peers)) or '?'}")
    limit = timeout or _config.timeout()
    message = (f"stragglar_mpi: Allreduce timed out after {limit:g} s in {phase}: {who}. "
               "This communicator's library state is now unusable; abort the job (comm.Abort()).")
    state.broken = message
    return StragglerTimeout(message, missing=missing, phase=phase, peers=peers)


def _same_everywhere(comm, check, deadline):
    """Run ``check`` on every rank and compare the results; raise the same error everywhere."""
    try:
        args, error = check(), None
    except (ValueError, TypeError, BufferError, MPI.Exception) as exc:
        args, error = None, exc
    state = state_of(comm)
    mine = repr(("error", f"{type(error).__name__}: {error}") if error else args.signature)
    everyone = _allgather_text(state, mine, deadline)
    problem = _mismatch(everyone)
    if error is not None:
        raise error
    if problem:
        raise ValueError(f"stragglar_mpi: Allreduce arguments differ across ranks: {problem}")
    return args


def _allgather_text(state, text, deadline):
    n = state.private.Get_size()
    raw = np.frombuffer(text.encode()[:4096].ljust(4096), np.uint8)
    everyone = np.empty((n, 4096), np.uint8)
    request = state.private.Iallgather(raw, everyone)
    if not _transport.wait([request], deadline):
        raise _timed_out(state, "the argument check (STRAGGLAR_VALIDATE)", None, ())
    return [bytes(row).decode().rstrip() for row in everyone]


_FIELDS = ("algorithm", "straggler", "in place", "count", "datatype size", "datatype", "op")


def _mismatch(everyone):
    """A readable account of what differs, naming the ranks; '' when all agree."""
    import ast
    errors = [f"rank {r}: {v[1]}" for r, v in enumerate(map(ast.literal_eval, everyone))
              if v[0] == "error"]
    if errors:
        return "bad arguments on " + "; ".join(errors)
    values = [ast.literal_eval(v) for v in everyone]
    parts = []
    for i, field in enumerate(_FIELDS):
        seen = {}
        for rank, v in enumerate(values):
            seen.setdefault(v[i], []).append(rank)
        if len(seen) > 1:
            groups = "; ".join(f"ranks {_ranges(r)}: {val!r}" for val, r in seen.items())
            parts.append(f"{field} ({groups})")
    return ", ".join(parts)


def _ranges(ranks):
    return ",".join(map(str, ranks)) if len(ranks) < 6 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"


def _roles(state, name, policy, nbytes, n, tracked=False, deadline=0.0):
    """(algorithm, straggler) for this call, the same on every rank.

    Calls that need arrival data ("auto", a policy by name, or a timeout that
    must name the missing ranks) go through the shared arrival table; the
    others touch nothing.
    """
    needs_roles = name == "auto" or (name in PHASE1_ROLES and isinstance(policy, str))
    if not (needs_roles or (tracked and n > 1)):
        return name, (policy if name in PHASE1_ROLES else None)
    if name == "auto" and not tracked and not _sampled(state, n, nbytes):
        return "native", None
    arrivals = state.arrivals()
    arrivals.arrive()
    state.tracked_seq = arrivals.seq
    previous = arrivals.previous()
    if previous is not None:
        state.history.append(previous)
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
            raise _timed_out(state, "the arrival of the early ranks", None, ())
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


def _exactly_commutative(op, datatype):
    """Whether op(a, b) == op(b, a) bit for bit, so reductions need no fixed order."""
    if not op.is_predefined:
        return False
    if op.handle in _ORDERED_FLOAT_OPS:
        return datatype.tocode() not in "efdgFDG"
    return True


@lru_cache(maxsize=256)
def _plan(name, n, straggler, rank, count, extent, in_place, commutative, dt_handle):
    """(chunks, plan) of ``rank``.  A miss costs one rank's rounds: StragglAR is verified
    once per n and a new straggler only relabels this rank's slice (schedule.rank_view)."""
    chunks, rounds = rank_view(name, n, straggler, rank)
    return chunks, compile_rounds(rounds, chunks, rank, count, extent, in_place, commutative,
                                  _prepared(name, n, straggler, rank, chunks))


def _prepared(name, n, straggler, rank, chunks):
    """Chunks that phase 1 leaves in the receive buffer of ``rank``."""
    kind = PHASE1.get(name)
    straggler = n - 1 if straggler is None else straggler
    if kind is None or rank == straggler:
        return frozenset()
    if kind == "reduce_scatter":
        return frozenset([rank - (rank > straggler)])
    return frozenset(range(chunks))


def _run_schedule(state, name, straggler, args, transport, deadline):
    comm, out, src = state.private, args.out, args.src
    dt, extent = out.datatype, out.extent
    rank, n = comm.Get_rank(), comm.Get_size()
    commutative = _exactly_commutative(args.op, dt)
    chunks, plan = _plan(name, n, straggler, rank, out.count, extent, args.in_place,
                         commutative, dt.handle)
    scratch_bytes = plan.scratch_bytes
    kind = PHASE1.get(name)
    sub = state.early_comm(straggler) if kind else None  # every rank: same LRU order
    if sub is not None:
        bounds = chunk_bounds(out.count, chunks)
        scratch_bytes = max(scratch_bytes, max(b[1] for b in bounds) * extent)
        started = _phase1(sub, kind, bounds, args, state.scratch(scratch_bytes))
        _wait(state, started.request, deadline, f"phase 1 ({kind} among the early ranks)")
        started.finish()
    scratch = state.scratch(scratch_bytes)
    t_p1 = MPI.Wtime()
    addresses = (src.address, out.address, MPI.buffer(scratch).address)
    first = _transport.execute(plan, addresses, comm, dt, args.op, transport, deadline)
    return t_p1, first


def _region(msg, offset, count):
    """A [buffer, count, datatype] spec of ``count`` elements at element ``offset``."""
    extent = msg.extent
    return [MPI.buffer.fromaddress(msg.address + offset * extent, count * extent), count, msg.datatype]


class _Phase1:
    """A nonblocking phase 1 and what to do once it completes."""

    def __init__(self, request, then=None):
        self.request, self.then = request, then

    def finish(self):
        if self.then:
            self.then()


def _phase1(sub, kind, bounds, args, scratch):
    """ReduceScatter (or AllReduce for "direct") among the early ranks, started."""
    src, out, op, count = args.src, args.out, args.op, args.out.count
    if kind == "allreduce":
        send = MPI.IN_PLACE if args.in_place else _region(src, 0, count)
        return _Phase1(sub.Iallreduce(send, _region(out, 0, count), op))
    offset, length = bounds[sub.Get_rank()]
    counts = [b[1] for b in bounds]
    if not args.in_place:
        return _Phase1(sub.Ireduce_scatter(_region(src, 0, count), _region(out, offset, length), counts, op))
    nbytes = length * out.extent
    request = sub.Ireduce_scatter(_region(out, 0, count), [scratch[:nbytes], length, out.datatype], counts, op)
    dst = np.frombuffer(MPI.buffer.fromaddress(out.address + offset * out.extent, nbytes), np.uint8)
    return _Phase1(request, lambda: dst.__setitem__(slice(None), scratch[:nbytes]))


def _record(state, name, straggler, policy, t_call, t_p1, first, t_end, transport):
    state.calls[name] += 1
    state.last = (name, straggler, policy, t_call, t_p1, first, t_end, transport)


def _last(name, straggler, policy, t_call, t_p1, first, t_end, transport):
    arrived = first if first is not None else t_p1
    return {
        "algorithm": name,
        "straggler": straggler,
        "policy": policy if name in PHASE1_ROLES else None,
        "transport": transport,
        "reduce_scatter": t_p1 - t_call,
        "wait": arrived - t_p1,
        "post_arrival": t_end - arrived,
        "total": t_end - t_call,
    }


def stats(comm) -> dict:
    """Per-communicator counters: ``calls`` (algorithm -> count) and ``last`` (the last call)."""
    state = state_of(comm)
    return {"calls": dict(state.calls), "last": _last(*state.last) if state.last else {}}
