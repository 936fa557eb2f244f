"""A rank's program for a call: the plans it runs, built once and cached here.

Every algorithm with a schedule runs the same way (run/execute.py ``run``): phase 1's
plan on the early ranks (or nothing), then the main plan, both on the private duplicate
in the call's memory, by the same interpreter.  What differs is only how the plans are
made, from this rank's own slice of verified schedules:

- a flat schedule (schedule.rank_view; StragglAR is verified once per n and a new
  straggler only relabels this rank's slice) and phase 1's ring among the early ranks
  (schedule/phase1.py);
- ``hierarchical``: both phases are schedules (schedule/hierarchical.py has the whole
  design): phase 1 ("reduce_to_owners") reduces each chunk along its lane to its owner
  on the straggler's node while the straggler is late; phase 2 starts with the
  straggler's raw chunks.  Phase 1's rounds are numbered after phase 2's, so the two
  never share a tag.  The pieces per slice come from the two-tier model
  (schedule/tiers.py ``pieces``) for the buffer's size and the communicator's links;
- ``hring``: the synchronous hierarchical ring (ReduceScatter inside each node, a ring
  per lane across the nodes, AllGather inside), one plan.  Every chunk is reduced at
  one place and then copied, so every rank ends with the same bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from .plan import Plan, compile_rounds
from ..decide.topology import shape
from ..schedule import PHASE1, phase1, rank_view, verify
from ..schedule import hierarchical as _two_tier
from ..schedule.tiers import pieces as model_pieces
from ..schedule.algorithms import HIERARCHICAL, HRING

#: Up to this many ranks a process verifies both whole two-tier schedules once per
#: (nodes, straggler, pieces); above, it builds only its own slice of each (the tests
#: verify the construction on block, cyclic and unequal layouts).
VERIFY_UP_TO = 256


@dataclass(frozen=True)
class Program:
    """What one rank runs: ``first`` (phase 1, or None) then ``plan``, with scratch for both."""
    first: Optional[Plan]
    plan: Plan
    scratch_bytes: int
    chunks: Optional[int] = None   # the plan's chunks, for staging round by round (None: staged whole)
    early: bool = False            # an early rank: staging copies all of it in at once
    phase1: Optional[str] = None   # how a timeout in ``first`` is named (None: not apart)


def program(seq, name, straggler, args):
    """This rank's ``Program`` of algorithm ``name`` (not native) for the call's ``args``."""
    comm, out = seq.private, args.out
    key = (comm.Get_rank(), out.count, out.extent, args.in_place, args.commutes)
    if name == HIERARCHICAL:
        nodes = seq.topology.nodes
        return _hierarchical(nodes, straggler, *key, pieces_of(seq, out.count * out.extent))
    if name == HRING:
        return _hring(seq.topology.nodes, *key)
    return _flat(name, comm.Get_size(), straggler, *key, out.datatype.handle)


# --- flat schedules ---------------------------------------------------------------------

@lru_cache(maxsize=256)
def _flat(name, n, straggler, rank, count, extent, in_place, commutative, dt_handle):
    chunks, rounds = rank_view(name, n, straggler, rank)
    kind = PHASE1.get(name)
    first = None
    if kind is not None and n > 2 and rank != straggler:
        m, mine = phase1.rank_view(kind, n, straggler, rank)
        first = compile_rounds(mine, m, rank, count, extent, in_place, commutative)
    plan = compile_rounds(rounds, chunks, rank, count, extent, in_place, commutative,
                          prepared(name, n, straggler, rank, chunks))
    return Program(first, plan, max(plan.scratch_bytes, first.scratch_bytes if first else 0),
                   chunks, early=kind is not None and rank != straggler,
                   phase1=f"phase 1 ({kind} among the early ranks)")


def prepared(name, n, straggler, rank, chunks):
    """Chunks that phase 1 leaves in the receive buffer of ``rank`` (none with one early
    rank: its own data stays where the caller put it)."""
    kind = PHASE1.get(name)
    straggler = n - 1 if straggler is None else straggler
    if kind is None or rank == straggler or n <= 2:
        return frozenset()
    if kind == phase1.REDUCE_SCATTER:
        return frozenset([rank - (rank > straggler)])
    return frozenset(range(chunks))


# --- two tiers ----------------------------------------------------------------------------

@lru_cache(maxsize=32)
def _verified(nodes, straggler, pieces):
    verify(_two_tier.phase1(nodes, straggler, pieces))
    verify(_two_tier.hierarchical(nodes, straggler, pieces))


@lru_cache(maxsize=256)
def _hierarchical(nodes, straggler, rank, count, extent, in_place, commutative, pieces):
    if sum(map(len, nodes)) <= VERIFY_UP_TO:
        _verified(nodes, straggler, pieces)
    chunks, first = _two_tier.rank_rounds(nodes, straggler, rank, pieces, phase=1)
    _, second = _two_tier.rank_rounds(nodes, straggler, rank, pieces, phase=2)
    prepared = frozenset(c for c, r in enumerate(_two_tier.owners_of(nodes, straggler, pieces))
                         if r == rank)
    after = [()] * len(second) + list(first)     # phase 1's tags apart from phase 2's
    plan1 = compile_rounds(after, chunks, rank, count, extent, in_place, commutative)
    plan2 = compile_rounds(second, chunks, rank, count, extent, in_place, commutative, prepared)
    return Program(plan1 if rank != straggler else None, plan2,
                   max(plan1.scratch_bytes, plan2.scratch_bytes))


def pieces_of(seq, nbytes) -> int:
    """Pieces per slice: the model's for ``nbytes`` and the measured links."""
    tiers = seq.tiers()
    if tiers is None:
        return _two_tier.pieces_for(len(seq.topology.nodes))
    m, k, _, figures = shape(tiers)
    return model_pieces(m, k, nbytes, *figures)


@lru_cache(maxsize=16)
def _hring_slices(nodes):
    """(chunks, every rank's rounds) of the verified hierarchical ring for ``nodes``."""
    schedule = _two_tier.hring(nodes)
    if schedule.n <= VERIFY_UP_TO:
        verify(schedule)
    mine = [[] for _ in range(schedule.n)]
    for rnd in schedule.rounds:
        by_rank = [[] for _ in range(schedule.n)]
        for t in rnd:
            by_rank[t.src].append(t)
            if t.dst != t.src:
                by_rank[t.dst].append(t)
        for r in range(schedule.n):
            mine[r].append(tuple(by_rank[r]))
    return schedule.chunks, tuple(tuple(rounds) for rounds in mine)


@lru_cache(maxsize=256)
def _hring(nodes, rank, count, extent, in_place, commutative):
    chunks, slices = _hring_slices(nodes)
    plan = compile_rounds(list(slices[rank]), chunks, rank, count, extent, in_place, commutative)
    return Program(None, plan, plan.scratch_bytes)
