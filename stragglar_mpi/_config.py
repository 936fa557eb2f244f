"""Every knob in one place: environment variables read per call, typos rejected.

| variable                   | meaning                                                  | default |
|----------------------------|----------------------------------------------------------|---------|
| STRAGGLAR_ALGO             | force an algorithm: stragglar, ring, rhd, direct, native, auto (overrides ``algorithm=``) | unset |
| STRAGGLAR_TRANSPORT        | cython or python                                         | cython  |
| STRAGGLAR_AUTO_MIN_BYTES   | ``auto`` takes the native AllReduce below this size     | 4194304 |
| STRAGGLAR_MODEL            | ``auto``'s cost model: alpha (s), bandwidth (bytes/s), margin | 1e-5,1e9,1.05 |
| STRAGGLAR_TIMEOUT          | seconds a call waits for late ranks before raising StragglerTimeout | off |
| STRAGGLAR_VALIDATE         | 1: check that every rank passed the same arguments     | 0       |
| STRAGGLAR_CUDA_AWARE       | 0 or 1: override the detection of a CUDA-aware MPI      | detected |
| STRAGGLAR_CUDA_PIECE_BYTES | piece size of host staging for device buffers           | see docs/GPU.md |
"""
from __future__ import annotations

import os
import warnings

ALGORITHMS = ("auto", "stragglar", "ring", "rhd", "direct", "native")
KNOWN = {"STRAGGLAR_ALGO", "STRAGGLAR_TRANSPORT", "STRAGGLAR_AUTO_MIN_BYTES", "STRAGGLAR_MODEL",
         "STRAGGLAR_TIMEOUT", "STRAGGLAR_VALIDATE",
         "STRAGGLAR_CUDA_AWARE", "STRAGGLAR_CUDA_PIECE_BYTES"}
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
    # Below a few MiB a round costs more than the bandwidth StragglAR saves (the
    # paper's own crossover on 8 GPUs is larger still); docs/BENCHMARKS.md.
    raw = os.environ.get("STRAGGLAR_AUTO_MIN_BYTES", "4194304")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"STRAGGLAR_AUTO_MIN_BYTES must be an integer, got {raw!r}") from None


def model():
    """(alpha seconds, bandwidth bytes/s, margin) for ``auto``: STRAGGLAR_MODEL="1e-5,1e9,1.05".

    The default bandwidth is deliberately low (a loaded shared-memory node), so
    ``auto`` asks for a delay that surely hides the ReduceScatter; on a fast
    interconnect set it to the link speed.  ``margin``: StragglAR must win by this factor.
    """
    raw = os.environ.get("STRAGGLAR_MODEL", "1e-5,1e9,1.05")
    try:
        alpha, bandwidth, margin = (float(x) for x in raw.split(","))
    except ValueError:
        raise ValueError(f"STRAGGLAR_MODEL must be 'alpha,bandwidth,margin', got {raw!r}") from None
    return alpha, bandwidth, margin


def timeout():
    """Seconds to wait for late ranks (STRAGGLAR_TIMEOUT), or None: wait forever."""
    raw = os.environ.get("STRAGGLAR_TIMEOUT", "").strip()
    if not raw or raw.lower() in ("0", "off", "none"):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"STRAGGLAR_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"STRAGGLAR_TIMEOUT must be positive, got {raw!r}")
    return value


def validating() -> bool:
    """STRAGGLAR_VALIDATE=1: compare every call's arguments across ranks."""
    return os.environ.get("STRAGGLAR_VALIDATE", "0").strip().lower() in ("1", "true", "yes", "on")
