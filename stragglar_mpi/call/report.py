"""The straggler report: who came last, by how much, and what StragglAR saved.

Its data are the arrival records the library reads anyway on every tracked call
(a call that takes a ticket in the arrival table: roles by arrival or
prediction, ``auto``'s sampled calls, calls under a timeout); untracked calls
add nothing and cost nothing here.  A record arrives one tracked call late
(call k's table is read at the start of call k+1), so the last tracked call of
a communicator is not in its report.

- **last**: how many of the recorded calls the rank arrived last in;
- **late by**: median and 95th percentile of its lateness over those calls
  (``lateness``: how long after the second-to-last rank it arrived);
- **saved**: for the calls that ran StragglAR with the rank as the straggler, the
  model of native (a synchronous AllReduce that starts when the last rank arrives,
  ``STRAGGLAR_MODEL``) minus the measured time after its arrival on the reporting rank.

``report(comm)`` is local (it reads this rank's copy, the same records on every
rank); ``STRAGGLAR_REPORT=1`` prints it on rank 0 at exit for every communicator
with tracked calls.
"""
from __future__ import annotations

import atexit
import sys
import weakref
from collections import deque

from mpi4py import MPI

from ..core import config as _config
from ..decide.policy import model_times
from ..core.state import peek

STRAGGLAR_ROLES = ("stragglar", "direct")
KEPT = 4096          # calls a report covers (the most recent)

_LOGS = weakref.WeakSet()


def lateness(record) -> float:
    """How late the last rank of one arrival record came (seconds)."""
    return record.gap


class Log:
    """The recorded calls of one communicator: (record, algorithm, straggler, bytes, post-arrival)."""

    def __init__(self, n, label):
        self.n, self.label = n, label
        self.pending = {}                 # tracked call number -> what ran, until its record comes
        self.calls = deque(maxlen=KEPT)
        _LOGS.add(self)

    def ran(self, seq, name, straggler, nbytes, post_arrival):
        self.pending[seq] = (name, straggler, nbytes, post_arrival)
        if len(self.pending) > 4:         # records lost to a timeout never come
            self.pending.pop(min(self.pending))

    def arrived(self, seq, record):
        ran = self.pending.pop(seq, None)
        if ran is not None:
            self.calls.append((record, *ran))


def log_of(state, n, label="") -> Log:
    if getattr(state, "log", None) is None:
        state.log = Log(n, label)
    return state.log


def report(comm, file=None) -> str:
    """Print (to ``file``, default stdout) and return the straggler report of ``comm``; local."""
    state = peek(comm)
    log = getattr(state, "log", None) if state is not None else None
    label = comm.Get_name() if isinstance(comm, MPI.Comm) else str(comm)
    text = render(log, comm.Get_size(), label)
    print(text, file=file or sys.stdout, flush=True)
    return text


def render(log, n, label) -> str:
    calls = list(log.calls) if log is not None else []
    head = f"stragglar_mpi straggler report: {label}, {n} ranks, {len(calls)} recorded calls"
    if not calls:
        return head + " (a call is recorded when it takes roles by arrival, is sampled by auto, " \
                      "or runs under STRAGGLAR_TIMEOUT)"
    alpha, bandwidth, _ = _config.current().model
    lines = [head, f"{'rank':>4} {'last':>6} {'share':>6} {'late ms p50':>11} {'p95':>8} "
                   f"{'StragglAR':>9} {'saved ms':>9}"]
    total = 0.0
    for rank in range(n):
        mine = [c for c in calls if c[0].last == rank]
        late = sorted(lateness(c[0]) * 1e3 for c in mine)
        ran = [c for c in mine if c[1] in STRAGGLAR_ROLES and c[2] == rank]
        saved = sum(model_times(n, c[3], alpha, bandwidth)[2] - c[4] for c in ran) * 1e3
        total += saved
        lines.append(f"{rank:>4} {len(mine):>6} {len(mine) / len(calls):>6.1%} "
                     f"{_quantile(late, 0.5):>11.3f} {_quantile(late, 0.95):>8.3f} "
                     f"{len(ran):>9} {saved:>9.3f}")
    lines.append(f"saved in all: {total:.3f} ms against the model of native (STRAGGLAR_MODEL "
                 f"alpha {alpha:g} s, bandwidth {bandwidth:g} B/s)")
    return "\n".join(lines)


def _quantile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


@atexit.register
def _at_exit():
    # Registered after mpi4py's own exit handler, so it runs before MPI is finalized.
    try:
        wanted = _config.current().report
    except ValueError:
        return
    if not wanted or MPI.Is_finalized() or MPI.COMM_WORLD.Get_rank() != 0:
        return
    for log in sorted(_LOGS, key=lambda g: g.label):
        print(render(log, log.n, log.label), flush=True)
