"""Every tag the library sends with, in one table.

A communicator's calls run in *sequences* (core/sequences.py): its blocking calls, and
each lane of its nonblocking ones.  Calls of one sequence never overlap on a rank, so
they share tags; two sequences may have calls in flight at once on the same private
duplicate, so each has tags of its own:

- round messages of a plan (phase 1 and phase 2 of every algorithm) on the private
  duplicate: ``rounds(s) + r % ROUND_TAGS`` for round r of sequence s (0..29999);
- the argument check of STRAGGLAR_VALIDATE there: ``validate(s)`` (30000 + s);
- arrival messages on the arrival table's duplicate: ``arrival(s, kind)``, and the stall
  watchdogs' questions and answers there (``WATCH_QUERY``, ``WATCH_ANSWER``).

The setup's presence messages count down from MPI_TAG_UB (at least 32767 by the
standard), so they never meet the others; the link and clock measurements run at
setup, before any call.
"""
from __future__ import annotations

from mpi4py import MPI

SEQUENCES = 5               # the blocking calls and 4 lanes of nonblocking ones
ROUND_TAGS = 6000           # a plan's round r sends with tag rounds(s) + r % ROUND_TAGS
VALIDATE = SEQUENCES * ROUND_TAGS
PING = 4244                 # link measurement between nodes, at setup (decide/topology.py)
CLOCK = 7301                # clock offsets, at setup, on the arrival duplicate (decide/clock.py)
BENCH_MODEL = 7302          # the benchmark's own link measurement (bench/_model.py)
BENCH_BOUND = 7303          # the benchmark's exchange bound (bench/_run.py)
# The stall watchdog's question (which call is a rank in?) and its answer, on the
# arrival duplicate, from the watchdogs' thread (call/watchdog.py).
WATCH_QUERY, WATCH_ANSWER = 7310, 7311
# Kinds of arrival messages (decide/arrival.py, decide/notices.py): notices, an
# aggregator's group report, the coordinator's decision, the record's rounds, a timeout's
# views and named ranks, a late coordinator's question to an aggregator and its answer.
NOTICE, DECISION, REPORT, RECORD, VIEW, NAMED, QUERY, ANSWER = 1, 2, 3, 4, 5, 6, 7, 8
_ARRIVAL = 100


def rounds(sequence: int) -> int:
    """The first round tag of ``sequence``."""
    return sequence * ROUND_TAGS


def validate(sequence: int = 0) -> int:
    """The cross-rank argument check of STRAGGLAR_VALIDATE under a deadline."""
    return VALIDATE + sequence


def arrival(sequence: int, kind: int = 0) -> int:
    """Arrival messages of ``sequence`` (``kind`` 0: all kinds on one tag, the kind in
    the message)."""
    return _ARRIVAL + 16 * sequence + kind


def _top(minus):
    return MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) - minus


def setup():
    """Presence messages of a communicator's setup (on the caller's communicator)."""
    return _top(0)
