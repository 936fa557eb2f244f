"""``auto`` checks its cost model by measuring: it runs what measured fastest here.

Why: the cost model (schedule/tiers.py) prices the links it is given and has no CPU
term.  On 8 ranks sharing 2 cores, emulated nodes over TCP, our rhd beat both the MPI's
own AllReduce and the hierarchical ring the model chose with nobody late, and under a
heavy load the straggler-aware choice lost to them too: with only the natural skew of a
loaded machine as the "delay", hierarchical took 4x the hierarchical ring (issue 24,
docs/BENCHMARKS.md).  So ``auto`` takes the model's choice as the *situation* and
measures the candidates it leaves:

- nobody late enough (the model's choice is synchronous): the synchronous algorithms,
  ``candidates()``;
- a straggler-aware choice (the model expects the delay to pay for it): that choice
  and the synchronous algorithms, so that it runs only where it is really faster.

How, per size class (a power of two of bytes) and situation:

- The first calls form a *round*.  Its first pass runs the candidates in turn,
  FIRST_TRIALS times each, in an order every rank computes alike (the model's choice
  first, then the algorithm table's order; the second time reversed, so that a load
  that drifts touches every candidate alike).
- Each rank notes when it entered the call and when it left it, on the common clock
  (rank 0's: the arrival table's offsets).  After the pass one ``Iallreduce`` (MAX)
  under the call's deadline gives every rank the same figures: a run took from the
  last rank's entry to the last rank's exit, the benchmark's post-arrival time.  A
  straggler's delay therefore counts for no candidate, and whatever ``auto`` does
  after the last arrival (notices, roles, the plan) counts for the candidate it ran.
- When more than one candidate's best run is within CLOSE times the fastest one's (the
  best, because a first run may pay for building its plan), a second pass runs those
  CLOSE_RUNS times more (the fastest first, then reversed) and a second ``Iallreduce``
  agrees on them: the near-equal ones are where a few noisy runs decide wrongly, and
  timing them costs almost nothing.  A candidate's time is then the median of its runs,
  the statistic a job's steady state sees (a low quantile, such as the best run, favours
  an algorithm whose times spread wide: measured so, hierarchical beat hring while its
  median over 31 calls was 1.19x hring's).
- The least time wins, a tie goes to the candidate earlier in the table.  Every rank
  holds the same figures, so every rank takes the same decision.
- A new round comes RECHECK_FIRST calls of the class after the first, then after
  twice as many, ... up to RECHECK_LAST, so a machine whose speed changes is followed;
  in a straggler-aware situation also as soon as the expected delay has grown past
  GROWTH times the one at the end of the last round (more of phase 1 may hide now), and
  the gaps start over.  A later round's first pass runs each candidate once (their plans are
  built by then), the fastest of the last round first; a candidate that took more than
  SLOWER times the fastest sits out every other round: it costs the most to time and
  is the least likely to have become the fastest.

Which candidates a class times: those the model (policy.priced, with the links measured
at setup) prices within WIDE times the cheapest of them; the model's choice always.  A
candidate the model rules out by that much costs the most to time and is the least
likely to win (on the box's hosts MPICH's own AllReduce took 2-6x hierarchical after
the arrival): a job with a persistent straggler then pays little for its first calls.
An algorithm the model cannot price is timed.

Whether a straggler is late enough to try a straggler-aware algorithm at all stays the
model's decision on the arrival history (policy.py), and so does who plays the straggler.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from ..core import config as _config
from ..core.collective import issue
from ..core.errors import Pending
from ..core.steps import Wait
from ..core.lifetime import PROCESS
from ..schedule.algorithms import TABLE, WITH_ROLES
from .policy import SYNCHRONOUS, expected_gap, priced
from .why import MODEL

FIRST_TRIALS = 2      # timed runs of each candidate in a class's first round (later: one)
CLOSE = 1.5           # candidates within this factor of the fastest get a second pass...
CLOSE_RUNS = 3        # ...of this many runs each
RECHECK_FIRST = 32    # calls of a size class from the end of its first round to the next
RECHECK_LAST = 1024   # the gap doubles up to this
SLOWER = 2.0          # a candidate this much slower than the fastest sits out every other round
WIDE = 2.5            # a candidate the model prices this much above the cheapest is not timed
GROWTH = 2.0          # a straggler delay this much longer than at the last round: measure again
#: A candidate's time from its runs (the report names it: ``STATISTIC.__name__``).
STATISTIC = statistics.median

AGREEMENT = "auto's agreement on its measured times (nobody late)"


def candidates(spans_nodes: bool) -> tuple:
    """The synchronous algorithms (no roles), in the table's order.  Across nodes the
    hierarchical ring stands for the flat ring, whose every step waits on a link
    between nodes (measured 3.6-3.8x slower than it on 2 emulated nodes of 4); on one
    node (or a rank per node) the flat ring stands for it, as call/allreduce runs it."""
    skip = ({a.flat for a in TABLE} if spans_nodes
            else {a.name for a in TABLE if a.layout == "nodes"})
    return tuple(a.name for a in TABLE if not a.roles and a.name not in skip)


def size_class(nbytes: int) -> int:
    """Calls of ``2**k`` to ``2**(k+1) - 1`` bytes share class k."""
    return max(int(nbytes), 1).bit_length() - 1


def within_margin(names: tuple, prices: dict, keep: str) -> tuple:
    """``names`` less those the model prices over WIDE times the cheapest of them
    (``keep``, the model's choice, and one it does not price always stay)."""
    known = [prices[a] for a in names if a in prices]
    if not known:
        return names
    least = min(known)
    return tuple(a for a in names if a == keep or a not in prices or prices[a] <= WIDE * least)


def trial_order(names: tuple, first: str, trials: int = FIRST_TRIALS) -> tuple:
    """The runs of a first round: ``first`` then the other ``names``; every other pass reversed."""
    ahead = ((first,) if first in names else ()) + tuple(a for a in names if a != first)
    runs = ()
    for t in range(trials):
        runs += ahead[::-1] if t % 2 else ahead
    return runs


def recheck_order(names: tuple, times: dict, rested: tuple = ()) -> tuple:
    """The runs of a later round: each candidate once, the fastest of the last round
    first (a tie, or one not timed, in the table's order); one over SLOWER times the
    fastest only if it sat out the round before (``rested``)."""
    best = min(times.values(), default=0.0)
    runs = [a for a in names if a not in times or a in rested or times[a] <= SLOWER * best]
    return tuple(sorted(runs, key=lambda a: times.get(a, float("inf"))))


def timings(runs: dict) -> dict:
    """Seconds of each candidate: STATISTIC of its runs' (last exit - last entry)."""
    return {name: STATISTIC(times) for name, times in runs.items()}


def close_order(times: dict, names: tuple) -> tuple:
    """The second pass of a round: the candidates whose ``times`` (their best runs) are
    within CLOSE times the fastest's, the fastest first, CLOSE_RUNS times (every other
    time reversed); () unless two or more."""
    best = min(times.values())
    close = tuple(sorted((a for a in names if a in times and times[a] <= CLOSE * best),
                         key=lambda a: times[a]))
    if len(close) < 2:
        return ()
    return trial_order(close, close[0], CLOSE_RUNS)


def fastest(names: tuple, times: dict) -> str:
    """The candidate with the least time; a tie goes to the one earlier in ``names``."""
    return min(times, key=lambda name: (times[name], names.index(name)))


@dataclass
class SizeClass:
    """What ``auto`` knows about one size class in one situation (``Tuner.choose``)."""
    names: tuple                  # the candidates
    choice: str | None = None     # the measured fastest (None: no round finished yet)
    times: dict = field(default_factory=dict)   # seconds per candidate, last round
    calls: int = 0                # calls of this class in this situation so far
    next_round: int = 1           # the call that starts the next round
    gap: int = RECHECK_FIRST      # calls from the end of a round to the next one
    rounds: int = 0               # rounds finished
    rested: tuple = ()            # the candidates that sat out the last round
    delay: float = 0.0            # the expected straggler delay when the last round ended
    latest: float = 0.0           # the expected straggler delay at the latest call
    order: tuple = ()             # the runs of the pass under way (() between rounds)
    marks: list = field(default_factory=list)   # this rank's (entry, exit) of its runs
    runs: dict = field(default_factory=dict)    # candidate -> agreed seconds of this round's runs
    second: bool = False          # the pass under way is the second

    def due(self, delay: float) -> bool:
        """Whether a round starts at this call: none under way, and its turn has come or
        (a straggler-aware situation) the delay has grown past GROWTH times the last
        round's, which may have changed what is fastest."""
        if self.order:
            return False
        grown = self.choice is not None and delay > GROWTH * self.delay > 0.0
        return self.calls >= self.next_round or grown


class Tuner:
    """One communicator's measured choices (every rank holds the same)."""

    def __init__(self, names: tuple, clock):
        self.names = names            # candidates(): the synchronous algorithms
        self.clock = clock            # this rank's time on rank 0's clock
        self.classes = {}             # (size_class, situation) -> SizeClass
        self.timing = None            # the SizeClass whose run this call is, if any
        self.pick = None              # how choose() decided this call, decide/why.py's parts
                                      # (picked() reads it)
        self.agreeing = None          # this rank's marks of a finished pass, to agree on
        self._pass = None             # the SizeClass whose pass they are

    def choose(self, model_choice: str, nbytes: int, delay: float = 0.0, prices=None) -> str:
        """What this call runs: the next run of a round under way or due, else the measured
        choice (the model's before any round finished).  The situation is the model's
        choice: a synchronous one (no roles; the situation is then policy.SYNCHRONOUS, the
        synchronous choices of the model), or a straggler-aware one (then it is a candidate too);
        ``delay``: the straggler delay the model expects (seconds); ``prices``: called
        at a class's first call, the model's seconds per algorithm (``within_margin``)."""
        aware = model_choice in WITH_ROLES
        key = (size_class(nbytes), model_choice if aware else SYNCHRONOUS)
        cls = self.classes.get(key)
        if cls is None:
            names = ((model_choice,) if aware else ()) + self.names
            cls = self.classes[key] = SizeClass(within_margin(names, prices() if prices else {}, model_choice))
        cls.calls += 1
        cls.latest = delay if aware else 0.0
        if cls.due(cls.latest):
            rested = cls.rested
            if cls.choice is not None and cls.calls < cls.next_round:
                cls.gap = RECHECK_FIRST           # a longer delay: the model's choice runs,
                rested += (model_choice,)         # and the gaps start over
            cls.order = (trial_order(cls.names, model_choice) if cls.choice is None
                         else recheck_order(cls.names, cls.times, rested))
            cls.marks, cls.runs, cls.second = [], {}, False
        if cls.order:
            run = len(cls.marks)
            self.timing = cls
            self.pick = ("timed", run + 1, len(cls.order), cls.rounds == 0, cls.second, aware,
                         nbytes)
            return cls.order[run]
        self.timing = None
        self.pick = ("measured", cls.times, cls.latest, aware) if cls.choice else MODEL
        return cls.choice or model_choice

    def timed(self, entry: float, exit_: float) -> None:
        """This rank ran the current call's run from ``entry`` to ``exit_`` (common clock).
        After a pass's last run ``agreeing`` holds this rank's marks: ``agreed`` takes
        their elementwise max over the ranks, the same figures on every rank."""
        cls, self.timing = self.timing, None
        cls.marks.append((entry, exit_))
        if len(cls.marks) == len(cls.order):
            self.agreeing, self._pass = np.array(cls.marks, dtype=np.float64).ravel(), cls

    def agreed(self, shared) -> None:
        """The pass's figures, agreed: then a second pass, or the class takes the fastest."""
        cls, self.agreeing, self._pass = self._pass, None, None
        for name, (start, end) in zip(cls.order, shared.reshape(-1, 2).tolist()):
            cls.runs.setdefault(name, []).append(end - start)
        if not cls.second:
            best = {name: min(times) for name, times in cls.runs.items()}
            cls.order, cls.marks, cls.second = close_order(best, cls.names), [], True
            if cls.order:
                return
        now = timings(cls.runs)
        cls.order, cls.marks = (), []
        cls.choice = fastest(cls.names, now)
        cls.times = {**cls.times, **now}          # one that sat out keeps its last time
        cls.rested = tuple(a for a in cls.names if a not in now)
        cls.rounds += 1
        cls.delay = cls.latest      # what the round measured under (the history lags a change)
        cls.next_round = cls.calls + cls.gap
        cls.gap = min(2 * cls.gap, RECHECK_LAST)
        cls.runs, cls.second = {}, False

    def synchronous_time(self, nbytes: int, situation: str):
        """(candidate, seconds): the fastest synchronous candidate of ``nbytes``'s size
        class as the last round measured it (STATISTIC of its runs), in ``situation``
        where that has one, else in the synchronous situation; None if neither has."""
        for key in ((size_class(nbytes), situation), (size_class(nbytes), SYNCHRONOUS)):
            cls = self.classes.get(key)
            times = {a: t for a, t in cls.times.items() if a in self.names} if cls else {}
            if times:
                name = fastest(self.names, times)
                return name, times[name]
        return None

    def summary(self) -> dict:
        """Per size class (its smallest size in bytes) and situation (policy.SYNCHRONOUS,
        or the model's straggler-aware choice): what ``auto`` runs, the last round's times
        (seconds), the rounds so far, and in how many calls the next one starts (0: one
        is under way)."""
        out = {}
        for (k, situation), c in sorted(self.classes.items(), key=lambda kv: kv[0][0]):
            out.setdefault(1 << k, {})[situation] = {
                "algorithm": c.choice, "measured": dict(c.times), "rounds": c.rounds,
                "next_round_in": max(c.next_round - c.calls, 0) if not c.order else 0}
        return out


def setup(state) -> None:
    """Give a new communicator's blocking calls their tuner (decide/roles.setup)."""
    state.tuning = Tuner(candidates(not state.topology.flat), state.arrivals().now)


def measures(seq) -> bool:
    """Whether ``auto``'s calls on ``seq`` time their candidates (blocking calls, unless
    STRAGGLAR_AUTO_MEASURE=0)."""
    return getattr(seq, "tuning", None) is not None and _config.current().auto_measure


def choose(seq, model_choice: str, nbytes: int, n: int, measured=None) -> str:
    """What an ``auto`` call runs, given the cost model's choice (that choice itself when
    the sequence has no tuner, or with STRAGGLAR_AUTO_MEASURE=0).  Only the blocking
    calls measure: a nonblocking operation's lane has no tuner (its agreement would be
    a collective outside its turn), so it runs the model's choice.  ``measured``:
    ``measures(seq)``, where the caller has it."""
    if not (measures(seq) if measured is None else measured):
        return model_choice
    tuner = seq.tuning
    prices = lambda: priced(seq.history, n, nbytes, seq.tiers())  # noqa: E731
    return tuner.choose(model_choice, nbytes, expected_gap(seq.history), prices)


def timing(seq) -> bool:
    """Whether the call that ``choose`` just decided on ``seq`` is a timed run."""
    tuner = getattr(seq, "tuning", None)
    return tuner is not None and tuner.timing is not None


def picked(seq):
    """(whether this call is a timed run, how ``choose`` decided it: decide/why.py's
    parts, whose first item is "timed", "measured" or "model"; None when it was not
    asked); read once per call."""
    tuner = getattr(seq, "tuning", None)
    if tuner is None:
        return False, None
    pick, tuner.pick = tuner.pick, None
    return tuner.timing is not None, pick


def timed(seq, t_call: float, deadline: float, turn):
    """Generator: a timed run has ended on this rank (it entered the call at MPI_Wtime
    ``t_call``); a round's last run agrees on the figures with every rank, under ``deadline``."""
    tuner = getattr(seq, "tuning", None)
    end = tuner.clock()
    entry = end - (MPI.Wtime() - t_call)
    tuner.timed(entry, end)
    if tuner.agreeing is not None:
        shared = yield from agree(seq.private, tuner.agreeing, deadline, turn)
        tuner.agreed(shared)


def agree(comm, marks, deadline: float, turn):
    """Generator: the elementwise max of ``marks`` over ``comm``'s ranks (the private
    duplicate: in ``turn``, core/collective.py); ``Pending`` past ``deadline``."""
    shared = np.empty_like(marks)
    request = yield from issue(turn, lambda: comm.Iallreduce(marks, shared, MPI.MAX), deadline)
    if not (yield Wait([request], deadline)):
        PROCESS.keep(marks, shared)       # MPI may still write them: a collective cannot be cancelled
        raise Pending((), AGREEMENT)
    MPI.Request.Wait(request)
    return shared
