"""Every knob in one place: environment variables read per call, typos rejected.

| variable                   | meaning                                                  | default |
|----------------------------|----------------------------------------------------------|---------|
| STRAGGLAR_ALGO             | force an algorithm: stragglar, ring, rhd, direct, native, auto (overrides ``algorithm=``) | unset |
| STRAGGLAR_TRANSPORT        | cython or python                                         | cython  |
| STRAGGLAR_AUTO_MIN_BYTES   | ``auto`` takes the native AllReduce below this size     | 262144  |
"""
from __future__ import annotations

import os
import warnings

ALGORITHMS = ("auto", "stragglar", "ring", "rhd", "direct", "native")
KNOWN = {"STRAGGLAR_ALGO", "STRAGGLAR_TRANSPORT", "STRAGGLAR_AUTO_MIN_BYTES"}
_checked = []


def _check_names():
    """Warn once per process about STRAGGLAR_* variables that nothing reads."""
    if _checked:
        return
    _checked.append(True)
    unknown = sorted(k for k in os.environ if k.startswith("STRAGGLAR_") and k not in KNOWN)
    if unknown:
        warnings.warn(f"stragglar_mpi: unknown environment variable(s) {', '.join(unknown)}; "
                      f"known: {', '.join(sorted(KNOWN))}", RuntimeWarning, stacklevel=4)


def algorithm(requested) -> str:
    """The algorithm asked for: STRAGGLAR_ALGO, else ``requested``, else "auto"."""
    _check_names()
    forced = os.environ.get("STRAGGLAR_ALGO", "").strip().lower()
    name = forced or (requested if requested is not None else "auto")
    if not isinstance(name, str) or name.lower() not in ALGORITHMS:
        source = "STRAGGLAR_ALGO" if forced else "algorithm"
        raise ValueError(f"{source} must be one of {', '.join(ALGORITHMS)}; got {name!r}")
    return name.lower()


def auto_min_bytes() -> int:
    raw = os.environ.get("STRAGGLAR_AUTO_MIN_BYTES", "262144")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"STRAGGLAR_AUTO_MIN_BYTES must be an integer, got {raw!r}") from None
