"""Cost model of StragglAR on device buffers staged through host memory (MPI not CUDA-aware).

The buffer of ``size`` bytes goes in pieces of ``piece`` bytes; ``copy_bandwidth``
is that of one direction of the host-device link (device-to-host and host-to-device
copies run at once, on separate copy engines, overlapped with the CPU's messages).
Times are what the straggler's arrival leaves: from its call to the last rank's
return.

- ``before``: every piece was one host AllReduce.  Only the first met the delay; each
  later piece paid an arrival round (two RMA round trips, 4 alpha) and its own
  ReduceScatter among the early ranks, on the critical path, while the copies of the
  neighbouring pieces overlapped it.
- ``after``: phase 1 of every piece runs during the delay on the early ranks' staged
  buffers; once the straggler arrives, its device-to-host copy, phase 2 and the
  host-to-device copy of the result are a three-stage pipeline over the pieces.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .classic import ring
from .simulate import simulate
from .stragglar import synthesize

ARRIVAL_ALPHAS = 4      # an arrival notice: two RMA round trips


@dataclass(frozen=True)
class Staged:
    pieces: int
    copy: float          # one piece across the host-device link
    phase2: float        # one piece's phase 2 (phase 1 hidden)
    unhidden: float      # one piece's phase 1 + phase 2 with nobody late
    before: float
    after: float
    ring: float          # Ring on the same pipeline, for comparison


def staged(n: int, size: float, piece: float, alpha: float, bandwidth: float,
           copy_bandwidth: float) -> Staged:
    """Post-arrival seconds of staged StragglAR at ``n`` ranks, before and after."""
    schedule = synthesize(n)
    k = max(1, math.ceil(size / piece))
    piece = size / k
    copy = piece / copy_bandwidth
    unhidden = simulate(schedule, piece, alpha, bandwidth).finish
    late = [0.0] * (n - 1) + [2 * unhidden]       # late enough to hide phase 1
    phase2 = simulate(schedule, piece, alpha, bandwidth, late).post_arrival
    before = copy + phase2 + (k - 1) * max(ARRIVAL_ALPHAS * alpha + unhidden, copy) + copy
    after = _pipelined(k, copy, phase2)
    ring_piece = simulate(ring(n), piece, alpha, bandwidth, late).post_arrival
    return Staged(k, copy, phase2, unhidden, before, after, _pipelined(k, copy, ring_piece))


def _pipelined(k, copy, stage):
    """Three stages (copy in, ``stage``, copy out) over ``k`` pieces."""
    return copy + stage + (k - 1) * max(stage, copy) + copy
