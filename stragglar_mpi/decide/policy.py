"""Who plays the straggler, and whether StragglAR pays: pure functions of the history.

Every rank holds the same history (the arrival records of earlier calls, read
from the shared table), so every rank takes the same decision.
"""
from __future__ import annotations

from collections import Counter
from operator import attrgetter

from ..core import config as _config
from ..schedule.algorithms import BY_NAME, NATIVE, modelled
from .topology import costs

POLICIES = ("arrival", "predict")   # who plays the straggler, besides a rank given by number
WINDOW = 8          # calls of history that a decision looks at
_GAP = attrgetter("gap")
SAMPLE_FIRST = 4    # while "auto" keeps choosing native, a pair of calls is recorded after
SAMPLE_MAX = 64     # this many calls, then twice as many, ... up to SAMPLE_MAX


def predict_straggler(history, n):
    """The rank that came last most often in the recent calls (ties: the most recent)."""
    recent = [rec.last for rec in list(history)[-WINDOW:]]
    if not recent:
        return n - 1
    counts = Counter(recent)
    best = max(counts.values())
    return next(r for r in reversed(recent) if counts[r] == best)


def expected_gap(history):
    """Median straggler gap (seconds) of the recent calls; 0 without history."""
    gaps = sorted(map(_GAP, list(history)[-WINDOW:]))
    return gaps[len(gaps) // 2] if gaps else 0.0


#: What "auto" takes when nobody is late enough: the MPI's own AllReduce, or across nodes
#: our hierarchical ring where the two-tier model prices it below the MPI's; the
#: situation of auto's measured size classes when its model chose one (decide/tuning.py).
SYNCHRONOUS = modelled(roles=False, spans_nodes=True)


def synchronous_algorithm(nbytes, tiers=None):
    """The fastest synchronous AllReduce: "native" on one tier; across nodes, "hring"
    when the two-tier model prices it below native (the MPI's own, priced as a flat
    ring or recursive halving/doubling at the slower tier)."""
    if tiers is None:
        return NATIVE
    return _cheapest(_model(None, nbytes, tiers), SYNCHRONOUS)


def _cheapest(model, names, gap=0.0):
    """The name of least cost after ``gap``; a tie goes to the MPI's own (no schedule),
    else to the name first in ``names``."""
    best, least = None, None
    for name in names:
        cost = (model[name].after(gap), BY_NAME[name].schedule)
        if least is None or cost < least:
            best, least = name, cost
    return best


def _model(n, nbytes, tiers, figures=None):
    """name -> Cost: on the measured ``tiers``, else on STRAGGLAR_MODEL's links
    (``figures``: that setting, read once by the caller)."""
    alpha, bandwidth = (figures or _config.model())[:2]
    return costs(nbytes, tiers, n, alpha, bandwidth)


def auto_algorithm(history, n, nbytes, tiers=None, measured=False, figures=None):
    """"stragglar" when the expected delay hides its ReduceScatter and it then beats a
    synchronous AllReduce by the configured margin; otherwise "native".

    ``tiers``: (topology, links) of a communicator that spans nodes; then the choice is
    among native, hring, flat stragglar and hierarchical by the two-tier model
    (schedule/tiers.py).  Native is priced as a flat ring or recursive halving/doubling
    at the slower tier (an MPI that does not follow the nodes); the synchronous choice
    is the cheaper of native and hring, and a straggler-aware one must beat it by the
    margin, with MEASURED_SLACK where the choice is then measured (``measured``: auto's
    tuner times it against the synchronous ones): the measurement catches a model that
    is off.  ``figures``: STRAGGLAR_MODEL, where the caller has read it.  (On the box's 2 hosts of 4 ranks at 1 Gbit/s the model priced hring 13-24%
    below what it took and hierarchical at it; hierarchical ran 1.2-1.3x faster,
    docs/LINKS.md.)
    """
    if n < 3:
        return NATIVE
    if not history:
        return synchronous_algorithm(nbytes, tiers)
    figures = figures or _config.model()
    model, margin = _model(n, nbytes, tiers, figures), figures[2]
    if tiers is None:
        aware, sync, measured = modelled(True, False), _cheapest(model, modelled(False, False)), False
    else:
        topology = tiers[0]
        late = predict_straggler(history, len(topology.node_of))
        # a schedule that needs the nodes needs a second rank on the straggler's node
        aware = modelled(True, spans_nodes=len(topology.node(late)) > 1)
        sync = _cheapest(model, SYNCHRONOUS)
    return _aware_or(model, aware, sync, expected_gap(history), margin, measured)


#: Where auto measures its choice, a straggler-aware one is tried if it beats the synchronous
#: one by the margin in a model that may be this much off (the box's hosts: hring 13-24%).
MEASURED_SLACK = 1.25


def _aware_or(model, aware, sync, gap, margin, measured=False):
    """The cheapest of ``aware`` after ``gap`` if it beats ``sync`` by ``margin`` (by the
    margin less MEASURED_SLACK when the choice is then measured), else ``sync``."""
    best = _cheapest(model, aware, gap)
    slack = MEASURED_SLACK if measured else 1.0
    return best if model[best].after(gap) * margin < model[sync].post_arrival * slack else sync


def priced(history, n, nbytes, tiers=None) -> dict:
    """name -> the model's seconds after the last arrival for this call (the expected
    delay hides what it can of each algorithm's phase 1): what ``auto`` needs not
    measure where the margin is wide (decide/tuning.py)."""
    gap = expected_gap(history) if history else 0.0
    return {name: cost.after(gap) for name, cost in _model(n, nbytes, tiers).items()}
