"""Why a call ran what it ran: the short reason in ``stats(comm)["last"]["why"]``.

Where a decision is made it keeps its parts, and ``text`` makes the sentence only when
``stats`` asks, so a repeated call pays for a tuple at most.  The parts are a string (a
fixed reason: an argument that takes the native path, decide/algorithm.for_arguments)
or a tuple whose first item says who decided:

- ``("named", requested, forced)``: the caller's ``algorithm=``, or STRAGGLAR_ALGO's
  (bind/args.check);
- ``("timed", run, runs, first_round, second_pass, aware, nbytes)``: a run of one of
  auto's measuring rounds;
- ``("measured", times, delay, aware)``: the fastest of auto's last round (seconds per
  candidate), measured with a straggler this many seconds late (``aware``: the model
  expected a straggler-aware algorithm to pay) or with nobody late enough;
- ``MODEL``: auto's cost model, unmeasured (decide/tuning.py).

The first item of a tuple made by ``auto`` is how it chose (``stats``' ``auto``).
"""
from __future__ import annotations

from ..schedule.algorithms import has_roles
from ..schedule.units import KiB, MiB

MODEL = ("model",)
_NOBODY = "nobody late enough for a straggler-aware algorithm to pay"


def text(algorithm: str, straggler, why) -> str | None:
    """The sentence for a call that ran ``algorithm`` with ``straggler`` (or None) for
    the reason ``why`` (the parts above; None: no reason kept)."""
    if why is None or isinstance(why, str):
        return why and f"{algorithm}: {why}"
    kind, *parts = why
    if kind == "timed":
        return _timed(algorithm, *parts)
    return f"{algorithm}: {_REASONS[kind](algorithm, straggler, *parts)}"


def size(nbytes: int) -> str:
    """'16 MiB', '4.5 MiB', '64 KiB', '100 B'."""
    for unit, name in ((MiB, "MiB"), (KiB, "KiB")):
        if nbytes >= unit:
            return f"{nbytes / unit:.4g} {name}"
    return f"{nbytes} B"


def _named(algorithm, straggler, requested, forced):
    how = "forced by STRAGGLAR_ALGO" if forced else "asked for by name"
    if requested == algorithm:
        return how
    return f"{requested} {how}, in its form for this layout"


def _timed(algorithm, run, runs, first_round, second_pass, aware, nbytes):
    which = "first round" if first_round else "re-check"
    step = f"run {run} of {runs}" + (" (second pass)" if second_pass else "")
    late = ", a rank late" if aware else ""
    return f"measuring: {algorithm}, {step} of auto's {which} at {size(nbytes)}{late}"


def _measured(algorithm, straggler, times, delay, aware):
    if not aware:
        late = f"where {_NOBODY}"
    elif has_roles(algorithm) and straggler is not None:
        late = f"with rank {straggler} late by about {delay * 1e3:.0f} ms"
    else:
        late = f"with a rank late by about {delay * 1e3:.0f} ms"
    others = sorted((t, name) for name, t in times.items() if name != algorithm)
    if algorithm not in times or not others:
        return f"measured fastest {late}"
    t, name = others[0]
    return (f"measured fastest {late} (median {times[algorithm] * 1e3:.1f} ms "
            f"vs {name} {t * 1e3:.1f} ms)")


def _model(algorithm, straggler):
    if has_roles(algorithm):
        return "auto's cost model expects the straggler's delay to pay for it (unmeasured)"
    return f"{_NOBODY} (auto's cost model, unmeasured)"


_REASONS = {"named": _named, "measured": _measured, "model": _model}
