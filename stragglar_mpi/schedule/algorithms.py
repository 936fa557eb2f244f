"""The one table of algorithm facts: every room that needs one reads it here.

Adding an algorithm is one row here, its schedule (a synthesizer in this package) and
its cost in ``tiers.costs``.  Config's accepted names, ``auto``, the report,
the verifier, the simulator, the demo and the benchmark read these rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


#: The names, each spelled once: code that compares against one algorithm uses these.
STRAGGLAR, HIERARCHICAL, HRING, RING, RHD, DIRECT, NATIVE = (
    "stragglar", "hierarchical", "hring", "ring", "rhd", "direct", "native")
AUTO = "auto"                       # not a row: the library chooses (decide/policy.py)
#: What the early ranks do during the straggler's delay (the ``phase1`` column; phase1.py).
REDUCE_SCATTER, ALLREDUCE, REDUCE_TO_OWNERS = "reduce_scatter", "allreduce", "reduce_to_owners"


@dataclass(frozen=True)
class Algorithm:
    name: str
    #: what the early ranks do during the straggler's delay: None, REDUCE_SCATTER
    #: (among the n-1), ALLREDUCE (among the n-1) or REDUCE_TO_OWNERS (chunk c
    #: reduced over every rank but the straggler at ``schedule.owners[c]``)
    phase1: str | None
    roles: bool            # takes a straggler (a rank, "arrival" or "predict")
    straggler_aware: bool  # hides work in the delay: the report prices what it saved
    chunked: bool          # its plan moves equal chunks round by round (staged chunk by chunk)
    layout: str            # "any", or "nodes": needs several nodes, a second rank beside S
    multi_port: bool       # a rank may talk to several peers in one round
    schedule: bool         # runs a verified schedule of this package (native: the MPI's own)
    shown: bool            # in the demo's table and the benchmark's default list
    flat: str | None       # layout "nodes": what runs where the nodes do not apply
    modelled: bool         # among what auto's cost model chooses from (decide/policy.py)
    one_chunk: bool        # a rank's port carries one chunk a round (the verifier's check)


TABLE = (
    Algorithm(STRAGGLAR, REDUCE_SCATTER, True, True, True, "any", False, True, True,
              None, True, True),
    Algorithm(HIERARCHICAL, REDUCE_TO_OWNERS, True, True, False, "nodes", True, True, False,
              STRAGGLAR, True, True),
    Algorithm(HRING, None, False, False, False, "nodes", False, True, False, RING, True, False),
    Algorithm(RING, None, False, False, True, "any", False, True, True, None, False, False),
    Algorithm(RHD, None, False, False, True, "any", False, True, True, None, False, False),
    Algorithm(DIRECT, ALLREDUCE, True, True, True, "any", False, True, False,
              None, False, False),
    Algorithm(NATIVE, None, False, False, False, "any", False, False, True, None, True, False),
)
BY_NAME = {a.name: a for a in TABLE}

#: What a caller may ask for: a row, or "auto" (the library chooses: decide/policy.py).
CHOICES = (AUTO,) + tuple(a.name for a in TABLE)
#: Schedules that ``build(name, n)`` makes for any layout; and those that need the nodes.
ALGORITHMS = tuple(a.name for a in TABLE if a.schedule and a.layout == "any")
TOPOLOGY_ALGORITHMS = tuple(a.name for a in TABLE if a.schedule and a.layout == "nodes")
PHASE1 = {a.name: a.phase1 for a in TABLE if a.schedule}
#: Schedules of this package that are not a caller's choice: "reduce_to_owners",
#: hierarchical StragglAR's phase 1 as a schedule of its own (multi-port, like it).
SCHEDULE_ONLY = (REDUCE_TO_OWNERS,)
MULTI_PORT = tuple(a.name for a in TABLE if a.multi_port)
STRAGGLER_AWARE = tuple(a.name for a in TABLE if a.straggler_aware)
#: Schedules that name a straggler (the verifier checks it is a rank).
WITH_STRAGGLER = tuple(a.name for a in TABLE if a.roles and a.schedule) + SCHEDULE_ONLY
ONE_CHUNK = tuple(a.name for a in TABLE if a.one_chunk)
#: What takes a straggler; what needs the nodes (decide/algorithm.for_layout may flatten it).
WITH_ROLES = frozenset(a.name for a in TABLE if a.roles)
ON_NODES = frozenset(a.name for a in TABLE if a.layout == "nodes")
CHUNKED = tuple(a.name for a in TABLE if a.chunked)
#: The demo's rows and the benchmark's default list: the MPI's own first, then our
#: synchronous schedules, then the straggler-aware ones (table order within each).
SHOWN = tuple(a.name for a in sorted((a for a in TABLE if a.shown),
                                     key=lambda a: (a.straggler_aware, a.schedule)))


@lru_cache(maxsize=None)
def modelled(roles: bool, spans_nodes: bool) -> tuple:
    """What auto's cost model chooses from: the synchronous rows (``roles`` False) or the
    straggler-aware ones; those that need several nodes only when ``spans_nodes``."""
    return tuple(a.name for a in TABLE if a.modelled and a.roles == roles
                 and (spans_nodes or a.layout == "any"))


def has_roles(name: str) -> bool:
    """Whether ``name`` takes a straggler (False for "auto" and unknown names)."""
    return name in WITH_ROLES
