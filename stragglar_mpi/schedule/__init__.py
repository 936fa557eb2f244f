"""StragglAR and classic AllReduce algorithms as verified, simulated schedules (pure Python)."""
from __future__ import annotations

import functools

from .classic import direct, rhd, ring
from .model import ALGORITHMS, Schedule, ScheduleError, Transfer, chunk_bounds
from .simulate import Simulation, simulate
from .stragglar import lower_bound_rounds, synthesize
from .verify import PHASE1, verify

__all__ = [
    "ALGORITHMS", "PHASE1", "Schedule", "ScheduleError", "Simulation", "Transfer",
    "build", "chunk_bounds", "direct", "lower_bound_rounds", "rhd", "ring", "simulate",
    "synthesize", "verify",
]


@functools.lru_cache(maxsize=32)
def build(algorithm: str, n: int, straggler: int | None = None) -> Schedule:
    """The verified schedule of ``algorithm`` for ``n`` ranks (ring and rhd ignore ``straggler``)."""
    if algorithm == "stragglar":
        schedule = synthesize(n, straggler)
    elif algorithm == "direct":
        schedule = direct(n, straggler)
    elif algorithm in ("ring", "rhd"):
        return _build_classic(algorithm, n)
    else:
        raise ScheduleError(f"unknown algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    return verify(schedule)


@functools.lru_cache(maxsize=32)
def _build_classic(algorithm: str, n: int) -> Schedule:
    return verify(ring(n) if algorithm == "ring" else rhd(n))
