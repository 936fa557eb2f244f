"""Two-tier alpha-beta model: what each algorithm costs after the straggler arrives.

``m`` nodes of ``k`` ranks (n = m*k), a buffer of ``s`` bytes; a message inside a node
costs ``a1 + bytes/b1``, between nodes ``a2 + bytes/b2``.  A rank's link inside its
node and its NIC are separate ports (as in the simulator with ``Tiers``): the
messages of one step queue on the port they use.  L(x) = ceil(log2 x).

| algorithm | phase 1 (hidden in the delay) | after the last arrival |
|---|---|---|
| native (the MPI's own, priced as the better of ring and rhd) | - | min of the two |
| ring (flat) | - | 2(n-1) (a2 + s/(n b2)) |
| rhd (flat, n a power of two) | - | 2 L(n) a2 + 2 (n-1)/n s/b2 |
| hring (hierarchical ring: NCCL, MPICH SMP-aware) | - | 2(k-1)(a1 + s/(k b1)) + 2(m-1)(a2 + s/(k m b2)) (L lanes: s/L for s/k) |
| stragglar (flat) | (n-2)(a2 + s/((n-1) b2)) | (n-2+L(n)) (a2 + s/((n-1) b2)) |
| direct (flat) | 2(n-2)(a2 + s/((n-1) b2)) | L(n) (a2 + s/b2) |
| hierarchical stragglar, W pieces | sum over r < k-1+R of max(x_r c, N1 [r >= k-1]) | 2 I + I' + R max(I, N2) |

with P = s/((k-1) W) (a piece), c = a1 + P/b1, I = (k-1) c (a rank's k-1 pieces of a
round inside its node), R = W + L(m) - 1 (the rounds of the lanes' broadcast,
schedule/hierarchical.py ``spread``; a few more for some m that are not powers of two),
N2 = a2 + s/(k W b2) (after the arrival a round's k-1 pieces cross on k lanes),
I' = (k-1)(a1 + s/(k W b1)) (a node's last share) and N1 = a2 + P/b2 (phase 1 reduces
on the owners' k-1 lanes).  After the arrival S's scatter and A's share of the first
pieces (2 I) fill the pipeline, then every round a piece moves on every stage at once
(the slower of the node's link and the NIC sets the pace), and the last share (I')
drains it.  Phase 1: round r of the staggered ReduceScatter inside the nodes carries
x_r = #{o in 1..k-1 : 0 <= r-o+1 < W} pieces on a rank's link (the senders join one
by one), and from round k-1 on the lanes reduce a piece across.
W is chosen by ``pieces`` (the post-arrival minimum; never pieces under MIN_PIECE).
The floor after the arrival: max(s/(b1 + b2), s/(k b2)) (S must send s bytes over
its two ports; every other node must take in s bytes, the reductions of S's new
data, over its k lanes; b2 is a lane's bandwidth while all are busy, so one link per
node shared by its k ranks is k b2: topology.measure).

Flat algorithms are priced at the slower tier: with nodes in any layout some message
of nearly every step crosses nodes, and a step ends with its slowest message.  The
simulator (``simulate`` with ``Tiers``) runs the schedules themselves; tests compare.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from .algorithms import DIRECT, HIERARCHICAL, HRING, NATIVE, RHD, RING, STRAGGLAR
from .units import KiB

__all__ = ["Cost", "costs", "flat", "floor", "hierarchical_cost", "pieces"]

#: Pieces are never cut smaller than this many bytes (small buffers stay one piece).  The
#: model has no per-round CPU cost: where a node's CPUs are busy a round costs more than a
#: message's latency, and fewer, larger pieces win (docs/LINKS.md: 16 pieces of 1 MiB took
#: 188-196 ms where the model's 53 took 224 on the box's 4 hosts at 1 Gbit/s); a floor of
#: 1 MiB there made the model prefer hring at 4-8 MiB on fast links, so it stays 256 KiB.
MIN_PIECE = 256 * KiB
MAX_PIECES = 64


@dataclass(frozen=True)
class Cost:
    phase1: float         # seconds of work the early ranks do during the delay
    post_arrival: float   # seconds from the last arrival to the end

    def after(self, gap: float) -> float:
        """Post-arrival time when the straggler comes ``gap`` seconds late."""
        return max(0.0, self.phase1 - gap) + self.post_arrival


def _log2(x: int) -> int:
    return max(0, (x - 1).bit_length())


def floor(m: int, k: int, s: float, b1: float, b2: float) -> float:
    """No schedule can finish sooner after the arrival (see the module docstring)."""
    return max(s / (b1 + b2), s / (k * b2)) if m > 1 else s / (b1 + b2)


@lru_cache(maxsize=1024)
def pieces(m, k, s, a1, b1, a2, b2) -> int:
    """Pieces per slice for hierarchical StragglAR: the minimum of the post-arrival
    closed form (latency per piece against the pipeline's fill), no piece under
    MIN_PIECE bytes, at most MAX_PIECES."""
    most = max(1, min(MAX_PIECES, int(s / max(k - 1, 1) / MIN_PIECE)))
    return min(range(1, most + 1), key=lambda w: hierarchical_cost(m, k, s, a1, b1, a2, b2, w)[1])


def hierarchical_cost(m, k, s, a1, b1, a2, b2, pieces) -> tuple:
    """(phase 1, post-arrival) of hierarchical StragglAR with ``pieces`` pieces a slice."""
    chunk = s / (max(k - 1, 1) * pieces)
    c = a1 + chunk / b1
    inside = (k - 1) * c
    rounds = pieces + _log2(m) - 1 if m > 1 else 0
    if m == 1:
        return _phase1(k, pieces, c, 0.0, 0), 2 * inside
    lane = s / (k * pieces)                 # phase 2: k lanes share a round's k-1 pieces
    share = (k - 1) * (a1 + lane / b1)
    after = 2 * inside + share + rounds * max(inside, a2 + lane / b2)
    return _phase1(k, pieces, c, a2 + chunk / b2, rounds), after


def _phase1(k, pieces, c, across, rounds):
    """Round r of the staggered ReduceScatter carries the pieces of senders o = 1..k-1
    with 0 <= r - o + 1 < pieces; from round k-1 on the lanes also move a piece across."""
    total = 0.0
    for r in range(k - 1 + rounds):
        senders = min(k - 1, r + 1) - max(1, r - pieces + 2) + 1
        total += max(max(senders, 0) * c, across if r >= k - 1 else 0.0)
    return total


def costs(m: int, k: int, s: float, a1: float, b1: float, a2: float, b2: float,
          lanes: int | None = None) -> dict:
    """name -> Cost for ``m`` nodes of ``k`` ranks (one node or one rank per node: one tier).
    The one cost model: ``auto``, the report and the benchmark price a communicator with
    it through decide/topology.py ``costs``.
    ``lanes``: the smallest node's size where nodes differ (``k`` is then the largest):
    hring crosses on that many lanes only, each carrying s/lanes.
    Cached: ``auto`` prices every call, and the piece count alone is a search over up to
    MAX_PIECES closed forms (3 ms at 64 MiB)."""
    return dict(_costs(m, k, s, a1, b1, a2, b2, lanes))


@lru_cache(maxsize=1024)
def _costs(m, k, s, a1, b1, a2, b2, lanes):
    n = m * k
    if m == 1:
        a2, b2 = a1, b1
    lanes = k if lanes is None else max(1, min(lanes, k))
    out = {
        RING: Cost(0.0, 2 * (n - 1) * (a2 + s / n / b2)),
        RHD: Cost(0.0, 2 * _log2(n) * a2 + 2 * (n - 1) / n * s / b2),
        HRING: Cost(0.0, 2 * (k - 1) * (a1 + s / lanes / b1)
                      + 2 * (m - 1) * (a2 + s / (lanes * m) / b2)),
    }
    out[NATIVE] = min(out[RING], out[RHD], key=lambda c: c.post_arrival)
    if n >= 2:
        step = a2 + s / max(n - 1, 1) / b2
        out[STRAGGLAR] = Cost((n - 2) * step, (n - 2 + _log2(n)) * step)
        out[DIRECT] = Cost(2 * (n - 2) * step, _log2(n) * (a2 + s / b2))
    if m > 1 and k > 1:
        w = pieces(m, k, s, a1, b1, a2, b2)
        out[HIERARCHICAL] = Cost(*hierarchical_cost(m, k, s, a1, b1, a2, b2, w))
    return out


def flat(n: int, s: float, alpha: float, bandwidth: float) -> dict:
    """name -> Cost on one tier of links (one node)."""
    return costs(1, n, s, alpha, bandwidth, alpha, bandwidth)
