"""The straggler report: who came last, by how much, and what StragglAR saved.

Its data are the arrival records the library reads anyway on every tracked call
(a call that takes a ticket in the arrival table: roles by arrival or
prediction, ``auto``'s sampled calls, calls under a timeout); untracked calls
add nothing and cost nothing here.  A record arrives one tracked call late
(call k's table is read at the start of call k+1), so the last tracked call of
a communicator is not in its report.

- **last**: how many of the recorded calls the rank arrived last in;
- **late by**: median and 95th percentile of its lateness over those calls
  (the record's ``gap``: how long after the second-to-last rank it arrived);
- **StragglAR**: the calls that ran a straggler-aware algorithm (schedule/algorithms.py:
  stragglar, hierarchical, direct) with the rank as the straggler;
- **saved**: for those calls, the model's best synchronous AllReduce (ring, rhd or,
  across nodes, the hierarchical ring: schedule/tiers.py), which starts when the last
  rank arrives, minus the measured time after its arrival on the reporting rank.  The
  model is priced with the links the library measured at setup when the communicator
  spans nodes, else with ``STRAGGLAR_MODEL``; the report's last line says which.

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


def _pricing(log, n):
    """(seconds of the best synchronous AllReduce for a buffer of bytes, what it is)."""
    if log.tiers is None:
        alpha, bandwidth = _config.current().model[:2]   # a five-value model: its first tier
        what = f"STRAGGLAR_MODEL: alpha {alpha:g} s, bandwidth {bandwidth:g} B/s"
    else:
        alpha = bandwidth = None
        a1, b1, a2, b2 = shape(log.tiers)[3]
        what = (f"the links measured at setup: inside a node alpha {a1:g} s, bandwidth {b1:g} B/s; "
                f"between nodes alpha {a2:g} s, bandwidth {b2:g} B/s")
    return (lambda nbytes: _best_synchronous(costs(nbytes, log.tiers, n, alpha, bandwidth),
                                             log.tiers is not None)), what


def _best_synchronous(model, spans_nodes):
    # The candidates auto measures (decide/tuning.py), so that "saved" is priced against
    # the set auto chooses from; native is priced as the model prices it.
    return min(model[name].post_arrival for name in candidates(spans_nodes) if name in model)


def render(log, n, label) -> str:
    calls = list(log.calls) if log is not None else []
    head = f"stragglar_mpi straggler report: {label}, {n} ranks, {len(calls)} recorded calls"
    if not calls:
        return "\n".join([head + " (a call is recorded when it takes roles by arrival, is sampled "
                          "by auto, or runs under STRAGGLAR_TIMEOUT)"] + _measured(log))
    synchronous, pricing = _pricing(log, n)
    lines = [head, f"{'rank':>4} {'last':>6} {'share':>6} {'late ms p50':>11} {'p95':>8} "
                   f"{'StragglAR':>9} {'saved ms':>9}"]
    total = 0.0
    for rank in range(n):
        mine = [c for c in calls if c[0].last == rank]
        late = sorted(c[0].gap * 1e3 for c in mine)
        ran = [c for c in mine if c[1] in STRAGGLER_AWARE and c[2] == rank]
        saved = sum(synchronous(c[3]) - c[4] for c in ran) * 1e3
        total += saved
        lines.append(f"{rank:>4} {len(mine):>6} {len(mine) / len(calls):>6.1%} "
                     f"{_quantile(late, 0.5):>11.3f} {_quantile(late, 0.95):>8.3f} "
                     f"{len(ran):>9} {saved:>9.3f}")
    ran = Counter(c[1] for c in calls)
    lines.append("ran: " + ", ".join(f"{name} {count}" for name, count in sorted(ran.items())))
    lines.append(f"saved in all: {total:.3f} ms against a model of the best synchronous AllReduce, "
                 f"priced with {pricing}")
    return "\n".join(lines + _measured(log))


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


def _quantile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


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
