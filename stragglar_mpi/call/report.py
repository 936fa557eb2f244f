"""The straggler report: who came last, by how much, and what StragglAR saved.

Its data are the arrival records the library reads anyway on every tracked call
(a call that takes a ticket in the arrival table: roles by arrival or
prediction, ``auto``'s sampled calls and timed runs, calls under a timeout);
untracked calls add nothing and cost nothing here.  A call's record is complete when
it returns (decide/roles.settle), so every tracked call is in the report, the first
and the last included.  A rank's arrival is when it entered the call, on rank 0's
clock (decide/clock.py).

Per rank, each figure with the number of calls it rests on:

- **last**: the share of the recorded calls it arrived last in;
- **late ms**: median and 95th percentile of its lateness over those calls (the
  record's ``gap``: how long after the second-to-last rank it arrived);
- **straggler-aware**: the calls that ran a straggler-aware algorithm
  (schedule/algorithms.py: stragglar, hierarchical, direct) with the rank as the
  straggler, and what that **saved**: the fastest synchronous AllReduce at the call's
  size, which starts when the last rank arrives, minus the measured time after its
  arrival on the reporting rank.  That synchronous time is *measured* where ``auto``
  timed the synchronous candidates at that size class (decide/tuning.py, the
  STATISTIC of its runs, last entry to last exit), else an *estimate* of the cost
  model (schedule/tiers.py), whose figures the report names with where they came
  from: fitted here (the links measured at setup, across nodes), the default guess
  STRAGGLAR_MODEL, or STRAGGLAR_MODEL set by you.

``report(comm)`` is local (it reads this rank's copy, the same records on every
rank): it returns the text on every rank and prints it on one (``root``, rank 0 of the
communicator by default); ``STRAGGLAR_REPORT=1`` prints it on rank 0 of COMM_WORLD at
exit for every communicator with tracked calls.
"""
from __future__ import annotations

import sys
from collections import Counter, deque

from mpi4py import MPI

from ..core import config as _config
from ..core.lifetime import PROCESS, REPORT
from ..core.state import peek
from ..decide.policy import SYNCHRONOUS
from ..decide.topology import costs, shape
from ..decide.tuning import STATISTIC, candidates
from ..schedule.algorithms import STRAGGLER_AWARE
from ..schedule.units import format_size

KEPT = 4096          # calls a report covers (the most recent)
MEASURED, ESTIMATE = "measured", "estimate"


class Log:
    """The recorded calls of one communicator: (record, algorithm, straggler, bytes, post-arrival)."""

    def __init__(self, n, label, tiers=None, tuning=None):
        self.n, self.label, self.tiers = n, label, tiers     # tiers: (topology, links) or None
        self.tuning = tuning              # auto's measured synchronous choices (decide/tuning.Tuner)
        self.calls = deque(maxlen=KEPT)
        PROCESS.register("logs", self)

    def ran(self, record, name, straggler, nbytes, post_arrival):
        """A tracked call with the arrival record ``record`` ran ``name``."""
        self.calls.append((record, name, straggler, nbytes, post_arrival))


def log_of(state, n, label="") -> Log:
    if getattr(state, "log", None) is None:
        state.log = Log(n, label, state.tiers(), getattr(state, "tuning", None))
    return state.log


def report(comm, file=None, root=0) -> str:
    """The straggler report of ``comm``: returned on every rank, printed (to ``file``,
    default stdout) on rank ``root`` of ``comm`` (None: on every rank).  Local: it reads
    this rank's records and never communicates."""
    state = peek(comm)
    log = getattr(state, "log", None) if state is not None else None
    label = comm.Get_name() if isinstance(comm, MPI.Comm) else str(comm)
    text = render(log, comm.Get_size(), label)
    if root is None or comm.Get_rank() == root:
        _say(text, file or sys.stdout)
    return text


def _model(log, n):
    """(seconds of the model's best synchronous AllReduce for a buffer of bytes, its
    figures and where they came from)."""
    model = _config.current().model
    if log.tiers is None:
        alpha, bandwidth = model[:2]            # a five-value model: its first tier
        figures = f"alpha {alpha:g} s, bandwidth {bandwidth:g} B/s"
    else:
        alpha = bandwidth = None
        a1, b1, a2, b2 = shape(log.tiers)[3]
        figures = (f"inside a node alpha {a1:g} s, bandwidth {b1:g} B/s; "
                   f"between nodes alpha {a2:g} s, bandwidth {b2:g} B/s")
    return (lambda nbytes: _best_synchronous(costs(nbytes, log.tiers, n, alpha, bandwidth),
                                             log.tiers is not None)), f"{figures}: {_source(log, model)}"


def _source(log, model):
    """Where the model's figures came from."""
    if log.tiers is not None and len(model) == 3:
        return "fitted here (the links measured at setup)"
    given = "STRAGGLAR_MODEL=" + ",".join(f"{v:g}" for v in model)
    return f"the default guess {given}" if model == _config.read({}).model else f"{given} set by you"


def _best_synchronous(model, spans_nodes):
    # The candidates auto measures (decide/tuning.py), so that "saved" is priced against
    # the set auto chooses from; native is priced as the model prices it.
    return min(model[name].post_arrival for name in candidates(spans_nodes) if name in model)


def _baseline(log, n):
    """(bytes, algorithm) -> (seconds of the fastest synchronous AllReduce at that size,
    MEASURED or ESTIMATE, what it is): auto's own time where it measured one, else the
    model's."""
    model, figures = _model(log, n)

    def of(nbytes, name):
        found = log.tuning.synchronous_time(nbytes, name) if log.tuning is not None else None
        if found is None:
            return model(nbytes), ESTIMATE, f"the cost model's best synchronous AllReduce, {figures}"
        return found[1], MEASURED, f"auto's {STATISTIC.__name__} time of {found[0]} (decide/tuning.py)"
    return of


def render(log, n, label) -> str:
    """The report's text of ``log`` (None: no call recorded) on ``n`` ranks."""
    calls = list(log.calls) if log is not None else []
    head = f"stragglar_mpi straggler report: {label}, {n} ranks, {len(calls)} recorded calls"
    if not calls:
        return "\n".join([head + " (a call is recorded when it takes roles by arrival, is sampled "
                          "or timed by auto, or runs under STRAGGLAR_TIMEOUT)"] + _measured(log))
    baseline = _baseline(log, n)
    lines = [head, "arrival: when a rank entered the call, on rank 0's clock; "
                   "late: after the second-to-last rank, in the calls the rank came last",
             f"{'':4} {'last':^14} {'late ms':^24} {'straggler-aware':^16}".rstrip(),
             f"{'rank':>4} {'share':>7} {'calls':>6} {'p50':>9} {'p95':>8} {'calls':>5} "
             f"{'calls':>6} {'saved ms':>9} basis"]
    for rank in range(n):
        lines.append(_row(rank, calls, baseline))
    ran = Counter(c[1] for c in calls)
    lines.append("ran: " + ", ".join(f"{name} {count}" for name, count in sorted(ran.items())))
    return "\n".join(lines + _saved(calls, baseline) + _measured(log))


def _row(rank, calls, baseline):
    """One rank's line: each figure, then the number of calls it rests on."""
    mine = [c for c in calls if c[0].last == rank]
    late = sorted(c[0].gap * 1e3 for c in mine)
    aware = [c for c in mine if c[1] in STRAGGLER_AWARE and c[2] == rank]
    priced = [baseline(c[3], c[1]) for c in aware]
    saved = sum(p[0] - c[4] for p, c in zip(priced, aware)) * 1e3
    bases = sorted({p[1] for p in priced})
    return (f"{rank:>4} {len(mine) / len(calls):>7.1%} {len(calls):>6} {_ms(late, 0.5):>9} "
            f"{_ms(late, 0.95):>8} {len(mine):>5} {len(aware):>6} "
            f"{f'{saved:.3f}' if aware else '-':>9} {'+'.join(bases) or '-'}")


def _saved(calls, baseline):
    """The lines on "saved": in all, and per size the basis it rests on."""
    aware = [c for c in calls if c[1] in STRAGGLER_AWARE and c[2] == c[0].last]
    total = sum(baseline(c[3], c[1])[0] - c[4] for c in aware) * 1e3
    sizes = sorted({(c[3], c[1]) for c in aware} or {(c[3], SYNCHRONOUS) for c in calls})
    lines = [f"saved in all: {total:.3f} ms over {len(aware)} straggler-aware call(s): the fastest "
             "synchronous AllReduce at the size minus the time after the last arrival; that synchronous "
             "time, per size" + (" and algorithm run:" if aware else " recorded:")]
    for nbytes, name in sizes:
        seconds, basis, what = baseline(nbytes, name)
        which = f" ({name})" if aware else ""
        lines.append(f"  {format_size(nbytes)}{which}: {basis}, {seconds * 1e3:.3f} ms, {what}")
    return lines


def _measured(log):
    """What auto runs per size class and situation, and the times it measured there
    (decide/tuning.py)."""
    classes = log.tuning.summary() if log is not None and log.tuning is not None else {}
    lines = [f"  from {format_size(low)}, {'synchronous' if situation == SYNCHRONOUS else situation}: "
             f"{c['algorithm']} ("
             + ", ".join(f"{name} {t * 1e3:.3f}" for name, t in sorted(c["measured"].items(),
                                                                       key=lambda kv: kv[1]))
             + f" ms; {c['rounds']} round(s), next in {c['next_round_in']} calls)"
             for low, situations in classes.items() for situation, c in situations.items()
             if c["algorithm"] is not None]
    return ([f"auto ran what it measured fastest (last entry to last exit, "
             f"{STATISTIC.__name__} of its runs), per size and the model's choice "
             "(synchronous, or a straggler-aware one):"]
            + lines) if lines else []


def _ms(sorted_values, q):
    """The ``q`` quantile of ``sorted_values`` with three decimals, or "-" without any."""
    if not sorted_values:
        return "-"
    return f"{sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]:.3f}"


def _at_exit():
    # core/lifetime.py runs it before MPI is finalized.
    try:
        wanted = _config.current().report
    except ValueError:
        return
    if not wanted or MPI.Is_finalized() or MPI.COMM_WORLD.Get_rank() != 0:
        return
    for log in sorted(PROCESS.live("logs"), key=lambda g: g.label):
        _say(render(log, log.n, log.label), sys.stdout)


PROCESS.on_exit(REPORT, _at_exit)


def _say(text, file):
    """``text`` and its newline in one write: print() writes them apart when
    PYTHONUNBUFFERED=1, and mpiexec may put another rank's line between them."""
    file.write(text + "\n")
    file.flush()
