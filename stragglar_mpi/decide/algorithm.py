"""Where the algorithm that runs differs from the one asked for: every rewrite in one place.

- ``for_arguments`` (at the argument check, bind/args.py): native for one rank, nothing
  to reduce, an op that does not commute, a datatype our plans cannot split (pairs,
  derived, with gaps), and "auto" below STRAGGLAR_AUTO_MIN_BYTES;
- ``for_layout`` (after the roles, call/allreduce.py): a two-tier algorithm where the
  layout has no second tier is its flat twin: ``hierarchical`` is StragglAR on one node,
  with a rank per node or with the straggler alone on its node; ``hring`` is the ring on
  one node or with a rank per node.

Every rank reaches the same answer from the same arguments and layout.
"""
from __future__ import annotations

from ..core.features import PAIR_TYPES
from ..schedule.algorithms import AUTO, HIERARCHICAL, HRING, NATIVE, RING, STRAGGLAR
from .why import size


def for_arguments(name, n, out, op, settings):
    """(the algorithm that will run for these arguments, why it is native where it
    replaces ``name``: a reason for decide/why.py, else None) (``out``: the receive
    Message)."""
    reason = _native_because(name, n, out, op, settings)
    return (name, None) if reason is None else (NATIVE, reason)


def _native_because(name, n, out, op, settings):
    dt = out.datatype
    if n == 1:
        return "one rank"
    if out.count == 0 or out.address == 0:
        return "nothing to reduce (zero elements, or MPI.BOTTOM as the buffer)"
    if not op.Is_commutative():
        return "a non-commutative op"
    if dt.handle in PAIR_TYPES:
        return "a pair datatype (MAXLOC/MINLOC)"
    if not dt.is_predefined or dt.Get_size() != dt.Get_extent()[1]:
        return "a derived datatype"
    if name == AUTO and out.count * dt.Get_size() < settings.auto_min_bytes:
        return (f"below auto's {size(settings.auto_min_bytes)} threshold "
                "(STRAGGLAR_AUTO_MIN_BYTES)")
    return None


def for_layout(name, topology, straggler):
    """``name`` on this layout (decide/topology.py ``Topology``): flat where it has one tier."""
    if name == HIERARCHICAL and (topology.flat or len(topology.node(straggler)) < 2):
        return STRAGGLAR
    if name == HRING and topology.flat:
        return RING
    return name
