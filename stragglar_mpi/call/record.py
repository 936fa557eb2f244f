"""What a call leaves behind on its rank: counters and the last call's times (``stats``)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from mpi4py import MPI

from ..core.state import peek
from ..decide.why import text
from ..schedule.algorithms import AUTO, NATIVE, has_roles
from . import flight
from .report import log_of


@dataclass(frozen=True)
class CallRecord:
    """One finished call on this rank (MPI_Wtime values)."""
    algorithm: str
    straggler: int | None
    policy: object           # the caller's straggler= (a rank, "arrival", "predict")
    t_call: float            # entered the call
    t_p1: float              # phase 1 ended (t_call without one)
    first: float | None      # the first message of the plan came (None: no plan)
    t_end: float             # returned
    memory: str = "host"     # the route: "host", "device", "staged"
    arrival_messages: int = 0  # arrival messages this rank sent for the call (decide/arrival.py)
    auto: str | None = None  # how "auto" chose: "model", "measured", "timed" (decide/tuning.py); None: asked for by name
    why: object = None       # why it ran: decide/why.py's parts, made a sentence by as_dict

    def as_dict(self) -> dict:
        arrived = self.first if self.first is not None else self.t_p1
        return {
            "algorithm": self.algorithm,
            "straggler": self.straggler,
            "policy": self.policy if has_roles(self.algorithm) else None,
            "memory": self.memory,
            "reduce_scatter": self.t_p1 - self.t_call,
            "wait": arrived - self.t_p1,
            "post_arrival": self.t_end - arrived,
            "total": self.t_end - self.t_call,
            AUTO: self.auto,
            "why": text(self.algorithm, self.straggler, self.why),
        }


def decided(serial, name, straggler):
    """Its flight record (call/flight.py): what the call runs, ``name`` with ``straggler``
    (None: no roles); the straggler starts in phase 2, the others run (phase 1 first, for
    an algorithm that has one)."""
    rec = flight.RING[serial % flight.CAPACITY]      # flight.mine, inline: a call less
    if serial >= 0 and rec["serial"] == serial:
        rec["algorithm"] = flight.ALGORITHMS.index(name)
        rec["straggler"] = -1 if straggler is None else straggler
        rec["phase"] = flight.PHASE2 if straggler == rec["rank"] and rec["comm"] else flight.RUNNING


def record(seq, comm, args, decision, times, sent, tracked, serial=-1) -> CallRecord:
    """Count a call that ended in the sequence ``seq`` (blocking calls and the progress
    thread's operations alike) and, for a tracked blocking call, note it with its arrival
    record (``seq.arrived``, decide/roles.settle) in the straggler report (call/report.py).
    ``decision``: (algorithm, straggler, how auto chose: why.py's parts, or None when the
    algorithm was asked for by name, whose why is ``args.why``);
    ``times``: (the call's start, phase 1's end or None, the first receive or None);
    ``sent``: its arrival messages; ``serial``: its flight record, closed here.  Returns
    the call's ``CallRecord``."""
    name, straggler, how = decision
    t_call, t_p1, first = times
    t_end = MPI.Wtime()
    why = args.why if how is None else how
    rec = CallRecord(name, straggler, args.policy, t_call, t_p1 or t_call, first, t_end,
                     args.route, sent, how and how[0], why)
    flown = flight.RING[serial % flight.CAPACITY]    # flight.mine, inline: a call less
    if serial >= 0 and flown["serial"] == serial:
        flown["phase1_end"], flown["first_message"] = t_p1 or 0.0, first or 0.0
        flown["exited"], flown["phase"] = t_end, flight.DONE
    state = seq.owner
    with state.lock:
        state.calls[name] += 1
        if state.last is None or t_end >= state.last.t_end:
            state.last = rec
        if state.bindings is not None:
            state.bindings.last_was_hit = False
    if tracked and seq is state and seq.arrived is not None:
        post = t_end - (first if first is not None else t_call)
        log = seq.log if seq.log is not None else log_of(seq, args.n, comm.Get_name())
        log.ran(seq.arrived, name, straggler, args.out.count * args.out.extent, post)
    return rec


def _last_native_hit(bindings):
    """The compiled entry's last native call, which it counts without a record (its
    binding's ``args`` give the policy and the why)."""
    args = bindings.args
    return CallRecord(NATIVE, None, args.policy, bindings.t_call, bindings.t_call, None,
                      bindings.t_end, why=args.why)


def stats(comm) -> dict:
    """Per-communicator counters of this rank's calls, blocking and nonblocking together:
    ``calls`` (algorithm -> count), ``last`` (the call that ended last) and
    ``arrival_messages`` (``total``: the arrival messages this rank sent on ``comm``;
    ``last``: those of the last call; ``protocol``: "groups" or "notices",
    decide/roles.Tables).  Local: never communicates (before the first call on ``comm``
    it holds only empty ``calls`` and ``last``)."""
    state = peek(comm)
    if state is None:
        return {"calls": {}, "last": {}}
    calls, last, bindings = Counter(state.calls), state.last, state.bindings
    if bindings is not None and bindings.native_calls:
        calls[NATIVE] += bindings.native_calls
        if bindings.last_was_hit:
            last = _last_native_hit(bindings)
    tables = state.arrival_tables()
    sent = {"total": tables.sent_total() if tables is not None else 0,
            "last": last.arrival_messages if last else 0,
            "protocol": tables.protocol if tables is not None else None}
    return {"calls": dict(calls), "last": last.as_dict() if last else {}, "arrival_messages": sent}
