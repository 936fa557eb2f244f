"""Two-tier alpha-beta model: what each algorithm costs after the straggler arrives.

``m`` nodes of ``k`` ranks (n = m*k), a buffer of ``s`` bytes; a message inside a node
costs ``a1 + bytes/b1``, between nodes ``a2 + bytes/b2``; a rank's messages of one
step share its port.  L(x) = ceil(log2 x).

| algorithm | phase 1 (hidden in the delay) | after the last arrival |
|---|---|---|
| native (the MPI's own, priced as the better of ring and rhd) | - | min of the two |
| ring (flat) | - | 2(n-1) (a2 + s/(n b2)) |
| rhd (flat, n a power of two) | - | 2 L(n) a2 + 2 (n-1)/n s/b2 |
| hierarchical ring (NCCL, MPICH SMP-aware) | - | 2(k-1)(a1 + s/(k b1)) + 2(m-1)(a2 + s/(k m b2)) |
| stragglar (flat) | (n-2)(a2 + s/((n-1) b2)) | (n-2+L(n)) (a2 + s/((n-1) b2)) |
| direct (flat) | 2(n-2)(a2 + s/((n-1) b2)) | L(n) (a2 + s/b2) |
| hierarchical stragglar | (k-1)(a1 + s/(k b1)) + L(m-1)(a2 + s/(k b2)) + a2 + 2s/(k b2) | k a1 + s/b1 + L(m)(a2 + s/(k b2)) + (1 + [m > 2]) (k-1)(a1 + s/(k b1)) |

Flat algorithms are priced at the slower tier: with nodes in any layout some message
of nearly every step crosses nodes, and a step ends with its slowest message.
Hierarchical StragglAR (schedule/hierarchical.py): in phase 1 the nodes without S
reduce each slice over a binomial tree of its lane ranks and send it to its owner
(the helper, which owns S's slice too, receives two);
after the arrival S scatters its slices inside its
node (port-bound: s/b1), each other node receives every slice once across, on its
lanes, by doubling over nodes (L(m) steps of s/k per lane), and shares them inside
(k-1 copies of s/k from each lane rank); across more than two nodes the owners'
copies inside S's node also delay their second crossing.  (That is the cost of whole
slices; across more than two nodes the schedule pipelines the crossings in pieces:
up to 20% faster for large buffers, up to 25% slower (more rounds) for small ones.)  The simulator
(``simulate`` with ``Tiers``) runs the schedules themselves; tests compare the two.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cost", "costs", "flat"]


@dataclass(frozen=True)
class Cost:
    phase1: float         # seconds of work the early ranks do during the delay
    post_arrival: float   # seconds from the last arrival to the end

    def after(self, gap: float) -> float:
        """Post-arrival time when the straggler comes ``gap`` seconds late."""
        return max(0.0, self.phase1 - gap) + self.post_arrival


def _log2(x: int) -> int:
    return max(0, (x - 1).bit_length())


def costs(m: int, k: int, s: float, a1: float, b1: float, a2: float, b2: float) -> dict:
    """name -> Cost for ``m`` nodes of ``k`` ranks (one node or one rank per node: one tier).
    The one cost model: ``auto`` (decide/policy.py) and the report (call/report.py) read it."""
    n = m * k
    if m == 1:
        a2, b2 = a1, b1
    out = {
        "ring": Cost(0.0, 2 * (n - 1) * (a2 + s / n / b2)),
        "rhd": Cost(0.0, 2 * _log2(n) * a2 + 2 * (n - 1) / n * s / b2),
        "hring": Cost(0.0, 2 * (k - 1) * (a1 + s / k / b1) + 2 * (m - 1) * (a2 + s / (k * m) / b2)),
    }
    out["native"] = min(out["ring"], out["rhd"], key=lambda c: c.post_arrival)
    if n >= 2:
        step = a2 + s / max(n - 1, 1) / b2
        out["stragglar"] = Cost((n - 2) * step, (n - 2 + _log2(n)) * step)
        out["direct"] = Cost(2 * (n - 2) * step, _log2(n) * (a2 + s / b2))
    if m > 1 and k > 1:
        inside = a1 + s / k / b1
        out["hierarchical"] = Cost(
            (k - 1) * inside + _log2(m - 1) * (a2 + s / k / b2) + a2 + 2 * s / k / b2,
            k * a1 + s / b1 + _log2(m) * (a2 + s / k / b2) + (1 + (m > 2)) * (k - 1) * inside)
    return out


def flat(n: int, s: float, alpha: float, bandwidth: float) -> dict:
    """name -> Cost on one tier of links (one node)."""
    return costs(1, n, s, alpha, bandwidth, alpha, bandwidth)
