"""Cost model of StragglAR on device buffers staged through host memory (MPI not CUDA-aware).

``copy_bandwidth`` is that of one direction of the host-device link; copies in and
out run at once on separate copy engines, overlapped with the CPU's messages.
Times are what the straggler's arrival leaves: from its call to the last return.

- ``before``: the buffer went in pieces of ``piece`` bytes, each one host AllReduce.
  Only the first piece met the delay; each later one paid an arrival round (two RMA
  round trips, 4 alpha) and its own ReduceScatter among the early ranks on the
  critical path, while the copies of the neighbouring pieces overlapped it.
- ``after``: one plan over the whole buffer in host memory, phase 1 hidden in the
  delay.  The straggler copies chunk r+1 in while round r runs, and every chunk of
  the result is copied out once final, while later rounds run: what is left is the
  first chunk in, the rounds (or the copies, if slower), and the last chunk out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .classic import ring
from .simulate import simulate
from .stragglar import synthesize

ARRIVAL_ALPHAS = 4      # an arrival round of the design before the pipeline (it was two RMA round trips)


@dataclass(frozen=True)
class Staged:
    pieces: int          # before: host AllReduces per call
    before: float
    after: float
    ring: float          # Ring staged as ``after`` stages StragglAR, for comparison
    phase2: float        # StragglAR's phase 2 on the whole buffer (phase 1 hidden)
    copy: float          # the whole buffer across the host-device link, one direction


def staged(n: int, size: float, piece: float, alpha: float, bandwidth: float,
           copy_bandwidth: float) -> Staged:
    """Post-arrival seconds of staged StragglAR at ``n`` ranks, before and after."""
    k = max(1, math.ceil(size / piece))
    copy = size / copy_bandwidth
    p2_piece, unhidden = _hidden(n, size / k, alpha, bandwidth), _prompt(n, size / k, alpha, bandwidth)
    # the first piece in, its phase 2, each later piece (or its copies), the last piece out
    before = copy / k + p2_piece + (k - 1) * max(ARRIVAL_ALPHAS * alpha + unhidden, copy / k) + copy / k
    phase2 = _hidden(n, size, alpha, bandwidth)
    after = _overlapped(phase2, copy, n - 1)
    late = [0.0] * (n - 1) + [1.0 + 10 * size / bandwidth]
    ring_time = simulate(ring(n), size, alpha, bandwidth, late).post_arrival
    return Staged(k, before, after, _overlapped(ring_time, copy, n), phase2, copy)


def _hidden(n, size, alpha, bandwidth):
    """StragglAR after the straggler's arrival, phase 1 hidden in its delay."""
    schedule = synthesize(n)
    late = [0.0] * (n - 1) + [2 * _prompt(n, size, alpha, bandwidth)]
    return simulate(schedule, size, alpha, bandwidth, late).post_arrival


def _prompt(n, size, alpha, bandwidth):
    """StragglAR with nobody late: phase 1 and phase 2 on the critical path."""
    return simulate(synthesize(n), size, alpha, bandwidth).finish


def _overlapped(rounds, copy, chunks):
    """The first chunk in, the rounds or the copies (whichever is slower), the last chunk out."""
    return 2 * copy / chunks + max(rounds, copy * (chunks - 1) / chunks)
