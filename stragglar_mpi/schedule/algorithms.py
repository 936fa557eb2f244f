"""The one table of algorithm facts: every room that needs one reads it here.

Adding an algorithm is one row here, its schedule (a synthesizer in this package) and
its cost in ``tiers.costs``.  Config's accepted names, ``auto``, the report, staging,
the verifier, the simulator, the demo and the benchmark read these rows.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Algorithm:
    name: str
    #: what the early ranks do during the straggler's delay: None, "reduce_scatter"
    #: (among the n-1), "allreduce" (among the n-1) or "reduce_to_owners" (chunk c
    #: reduced over every rank but the straggler at ``schedule.owners[c]``)
    phase1: str | None
    roles: bool            # takes a straggler (a rank, "arrival" or "predict")
    straggler_aware: bool  # hides work in the delay: the report prices what it saved
    chunked: bool          # its plan moves equal chunks round by round (staged chunk by chunk)
    layout: str            # "any", or "nodes": needs several nodes, a second rank beside S
    multi_port: bool       # a rank may talk to several peers in one round
    schedule: bool         # runs a verified schedule of this package (native: the MPI's own)
    shown: bool            # in the demo's table and the benchmark's default list


TABLE = (
    Algorithm("stragglar", "reduce_scatter", True, True, True, "any", False, True, True),
    Algorithm("hierarchical", "reduce_to_owners", True, True, False, "nodes", True, True, False),
    Algorithm("hring", None, False, False, False, "nodes", False, True, False),
    Algorithm("ring", None, False, False, True, "any", False, True, True),
    Algorithm("rhd", None, False, False, True, "any", False, True, True),
    Algorithm("direct", "allreduce", True, True, True, "any", False, True, False),
    Algorithm("native", None, False, False, False, "any", False, False, True),
)
BY_NAME = {a.name: a for a in TABLE}

#: What a caller may ask for: a row, or "auto" (the library chooses: decide/policy.py).
CHOICES = ("auto",) + tuple(a.name for a in TABLE)
#: Schedules that ``build(name, n)`` makes for any layout; and those that need the nodes.
ALGORITHMS = tuple(a.name for a in TABLE if a.schedule and a.layout == "any")
TOPOLOGY_ALGORITHMS = tuple(a.name for a in TABLE if a.schedule and a.layout == "nodes")
PHASE1 = {a.name: a.phase1 for a in TABLE if a.schedule}
#: Schedules of this package that are not a caller's choice: "reduce_to_owners",
#: hierarchical StragglAR's phase 1 as a schedule of its own (multi-port, like it).
SCHEDULE_ONLY = ("reduce_to_owners",)
MULTI_PORT = tuple(a.name for a in TABLE if a.multi_port)
STRAGGLER_AWARE = tuple(a.name for a in TABLE if a.straggler_aware)
CHUNKED = tuple(a.name for a in TABLE if a.chunked)
SHOWN = tuple(a.name for a in TABLE if a.shown)


def has_roles(name: str) -> bool:
    """Whether ``name`` takes a straggler (False for "auto" and unknown names)."""
    row = BY_NAME.get(name)
    return row is not None and row.roles
