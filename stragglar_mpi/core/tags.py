"""Every tag the library sends with, in one table.

Round messages of a plan (phase 1 and phase 2 of every algorithm) use
``round % ROUND_TAGS`` (0..32766) on the call's private duplicate; every other message of
the library has a tag of its own here, above those or on a communicator of its own.  The setup tags count down from MPI_TAG_UB (at least
32767 by the standard), so they never meet a round's.
"""
from __future__ import annotations

from mpi4py import MPI

ROUND_TAGS = 32767          # a plan's round r sends with tag r % ROUND_TAGS
PING = 4244                 # link measurement between nodes, at setup (decide/topology.py)
CLOCK = 7301                # clock offsets, at setup (decide/clock.py)
BENCH_MODEL = 7302          # the benchmark's own link measurement (bench/_model.py)
BENCH_BOUND = 7303          # the benchmark's exchange bound (bench/_run.py)
# On the arrival duplicate (decide/arrival.py): notices, an aggregator's group report, the
# coordinator's decision, the record's rounds, a timeout's views and named ranks, and a
# late coordinator's question to an aggregator and its answer.
NOTICE, DECISION, REPORT, RECORD, VIEW, NAMED, QUERY, ANSWER = 11, 12, 13, 14, 15, 16, 17, 18


def _top(minus):
    return MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) - minus


def setup():
    """Presence messages and the straggler-value agreement (on the caller's communicator
    and the private duplicate)."""
    return _top(0)


def validate():
    """The cross-rank argument check of STRAGGLAR_VALIDATE under a deadline."""
    return _top(1)


def lane_setup():
    """The presence check before a lane's first nonblocking operation."""
    return _top(2)
