"""``auto`` with nobody late: the synchronous AllReduce that measured fastest here.

Why measure: the cost model (schedule/tiers.py) prices the links it is given and has
no CPU term; on 8 ranks sharing 2 cores, emulated nodes over TCP, our rhd beat both
the MPI's own AllReduce and the hierarchical ring that the model chose (issue 24,
docs/BENCHMARKS.md).  So when ``auto`` decides that nobody is late enough for a
straggler-aware algorithm, the synchronous one is the fastest *measured* one:

- Calls are grouped by size class (a power of two of bytes).  The first calls of a
  class form a *round*: the candidates run in turn, FIRST_TRIALS times each, in an
  order every rank computes alike (the model's choice first, then the algorithm
  table's order; the second pass reversed, so that a load that drifts touches every
  candidate alike).
- Each rank notes when it entered and left each timed run on the common clock (rank
  0's: the arrival table's offsets).  After the round's last run one ``Iallreduce``
  (MAX) under the call's deadline gives every rank the same figures: a run took from
  the last rank's entry to the last rank's exit (the benchmark's post-arrival time),
  so a rank that came late by chance does not count against the algorithm it drew.
- A candidate's time is the least of its runs (its first run may pay for building its
  plan); the least time wins, a tie goes to the earlier in the order.  Every rank
  holds the same figures, so every rank takes the same decision.
- A new round comes RECHECK_FIRST calls of the class after the first, then after
  twice as many, ... up to RECHECK_LAST, so a machine whose speed changes is followed.
  It runs each candidate once (their plans are built by then), the fastest of the last
  round first, and takes the fastest of its own runs.  A candidate that took more than
  SLOWER times the fastest sits out every other round: it costs the most to time and
  is the least likely to have become the fastest.

Only the synchronous choice is measured: whether a straggler-aware algorithm pays is
the cost model's decision on the arrival history (policy.py), as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from ..core.errors import Pending
from ..core.exchange import wait
from ..core.lifetime import PROCESS
from ..schedule.algorithms import TABLE

FIRST_TRIALS = 2      # timed runs of each candidate in a class's first round (later: one)
RECHECK_FIRST = 32    # calls of a size class from the end of its first round to the next
RECHECK_LAST = 1024   # the gap doubles up to this
SLOWER = 2.0          # a candidate this much slower than the fastest sits out every other round

AGREEMENT = "auto's agreement on its measured times (nobody late)"


def candidates(spans_nodes: bool) -> tuple:
    """The synchronous algorithms (no roles), in the table's order.  Across nodes the
    hierarchical ring stands for the flat ring, whose every step waits on a link
    between nodes (measured 3.6-3.8x slower than it on 2 emulated nodes of 4); on one
    node (or a rank per node) the flat ring stands for it, as call/allreduce runs it."""
    skip = "ring" if spans_nodes else "hring"
    return tuple(a.name for a in TABLE if not a.roles and a.name != skip)


def size_class(nbytes: int) -> int:
    """Calls of ``2**k`` to ``2**(k+1) - 1`` bytes share class k."""
    return max(int(nbytes), 1).bit_length() - 1


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


def timings(order: tuple, starts, ends) -> dict:
    """Seconds of each candidate: the least over its runs of (last exit - last entry)."""
    times = {}
    for name, start, end in zip(order, starts, ends):
        times[name] = min(times.get(name, float("inf")), float(end - start))
    return times


def fastest(order: tuple, times: dict) -> str:
    """The candidate with the least time; a tie goes to the one earlier in ``order``."""
    return min(times, key=lambda name: (times[name], order.index(name)))


@dataclass
class SizeClass:
    """What ``auto`` knows about the synchronous calls of one size class."""
    choice: str | None = None     # the measured fastest (None: no round finished yet)
    times: dict = field(default_factory=dict)   # seconds per candidate, last round
    calls: int = 0                # synchronous calls of this class so far
    next_round: int = 1           # the call that starts the next round
    gap: int = RECHECK_FIRST      # calls from the end of a round to the next one
    rounds: int = 0               # rounds finished
    rested: tuple = ()            # the candidates that sat out the last round
    order: tuple = ()             # the runs of the round under way (() between rounds)
    marks: list = field(default_factory=list)   # this rank's (entry, exit) of its runs


class Tuner:
    """One communicator's measured synchronous choices (every rank holds the same)."""

    def __init__(self, names: tuple, clock):
        self.names = names            # candidates()
        self.clock = clock            # this rank's time on rank 0's clock
        self.classes = {}             # size_class -> SizeClass
        self.timing = None            # the SizeClass whose run this call is, if any
        self.pick = None              # how choose() decided this call (entry() reads it)

    def choose(self, model_choice: str, nbytes: int) -> str:
        """The synchronous algorithm of this call: the next run of a round under way or
        due, else the measured choice (the model's before any round finished)."""
        cls = self.classes.setdefault(size_class(nbytes), SizeClass())
        cls.calls += 1
        if not cls.order and cls.calls >= cls.next_round:
            cls.order = (trial_order(self.names, model_choice) if cls.choice is None
                         else recheck_order(self.names, cls.times, cls.rested))
            cls.marks = []
        if cls.order:
            self.timing, self.pick = cls, "timed"
            return cls.order[len(cls.marks)]
        self.timing, self.pick = None, "measured" if cls.choice else "model"
        return cls.choice or model_choice

    def timed(self, entry: float, exit_: float, agree) -> None:
        """This rank ran the current call's run from ``entry`` to ``exit_`` (common clock).
        After a round's last run ``agree(vector)`` (the elementwise max over the ranks)
        gives every rank the same figures, and the class takes the fastest."""
        cls, self.timing = self.timing, None
        cls.marks.append((entry, exit_))
        if len(cls.marks) < len(cls.order):
            return
        shared = agree(np.array(cls.marks, dtype=np.float64).ravel()).reshape(-1, 2)
        now = timings(cls.order, shared[:, 0], shared[:, 1])
        cls.choice = fastest(cls.order, now)
        cls.times = {**cls.times, **now}          # one that sat out keeps its last time
        cls.rested = tuple(a for a in self.names if a not in now)
        cls.rounds += 1
        cls.next_round = cls.calls + cls.gap
        cls.gap = min(2 * cls.gap, RECHECK_LAST)
        cls.order, cls.marks = (), []

    def summary(self) -> dict:
        """Per size class (its smallest size in bytes): what ``auto`` runs when nobody is
        late, the last round's times (seconds), the rounds so far, and in how many calls the
        next one starts (0: one is under way)."""
        return {1 << k: {"algorithm": c.choice, "measured": dict(c.times), "rounds": c.rounds,
                         "next_round_in": max(c.next_round - c.calls, 0) if not c.order else 0}
                for k, c in sorted(self.classes.items())}


def setup(state) -> None:
    """Give a new communicator's state its tuner (decide/roles.setup)."""
    state.tuning = Tuner(candidates(not state.topology.flat), state.arrivals().now)


def synchronous(state, model_choice: str, nbytes: int) -> str:
    """What an ``auto`` call whose choice is synchronous runs (``model_choice`` when the
    state has no tuner)."""
    tuner = getattr(state, "tuning", None)
    return model_choice if tuner is None else tuner.choose(model_choice, nbytes)


def entry(state):
    """(this rank's common-clock time as it starts a timed run, or None when the call is
    none; how this call's synchronous choice was made: "timed", "measured", "model", or
    None when the tuner was not asked)."""
    tuner = getattr(state, "tuning", None)
    if tuner is None:
        return None, None
    pick, tuner.pick = tuner.pick, None
    return (None if tuner.timing is None else tuner.clock()), pick


def exit_(state, started: float, deadline: float = 0.0) -> None:
    """After a timed run (``entry`` gave ``started``); a round's last run agrees on the
    figures with every rank, under ``deadline``."""
    tuner = state.tuning
    tuner.timed(started, tuner.clock(), lambda marks: agree(state.private, marks, deadline))


def agree(comm, marks, deadline: float = 0.0):
    """The elementwise max of ``marks`` over ``comm``'s ranks; ``Pending`` past ``deadline``."""
    shared = np.empty_like(marks)
    request = comm.Iallreduce(marks, shared, MPI.MAX)
    if not wait([request], deadline):
        PROCESS.keep(marks, shared)       # MPI may still write them: a collective cannot be cancelled
        raise Pending((), AGREEMENT)
    return shared
