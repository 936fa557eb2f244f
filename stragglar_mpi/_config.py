"""Every knob in one place: environment variables read per call, typos rejected.

| variable                   | meaning                                                  | default |
|----------------------------|----------------------------------------------------------|---------|
| STRAGGLAR_ALGO             | force an algorithm: stragglar, hierarchical, ring, rhd, direct, native, auto (overrides ``algorithm=``) | unset |
| STRAGGLAR_TRANSPORT        | cython or python                                         | cython  |
| STRAGGLAR_AUTO_MIN_BYTES   | ``auto`` takes the native AllReduce below this size     | 4194304 |
| STRAGGLAR_MODEL            | ``auto``'s cost model: alpha (s), bandwidth (bytes/s), margin[, alpha and bandwidth between nodes] | 1e-5,1e9,1.05 |
| STRAGGLAR_TIMEOUT          | seconds a call waits for late ranks before raising StragglerTimeout | off |
| STRAGGLAR_VALIDATE         | 1: check that every rank passed the same arguments     | 0       |
| STRAGGLAR_CUDA_AWARE       | 0 or 1: override the detection of a CUDA-aware MPI      | detected |
| STRAGGLAR_CUDA_PIECE_BYTES | piece size of host staging for device buffers           | see docs/GPU.md |
"""
from __future__ import annotations

import os
import warnings
from functools import lru_cache
from typing import NamedTuple

ALGORITHMS = ("auto", "stragglar", "hierarchical", "ring", "rhd", "direct", "native")
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
                      f"known: {', '.join(sorted(KNOWN))}", RuntimeWarning, stacklevel=5)


class Settings(NamedTuple):
    """The knobs of one call, parsed from the environment."""
    algo: str                  # "" or a forced algorithm
    transport: str
    auto_min_bytes: int
    model: tuple               # (alpha seconds, bandwidth bytes/s, margin)
    timeout: float | None
    validate: bool


_READ = ("STRAGGLAR_ALGO", "STRAGGLAR_TRANSPORT", "STRAGGLAR_AUTO_MIN_BYTES", "STRAGGLAR_MODEL",
         "STRAGGLAR_TIMEOUT", "STRAGGLAR_VALIDATE")
# os.environ decodes every key and value it returns (about a microsecond each); its
# byte-keyed dict on POSIX gives the same values in a tenth of that, per call.
RAW_ENVIRON = getattr(os.environ, "_data", None)
_RAW_KEYS = tuple(k.encode() for k in _READ)
if not (isinstance(RAW_ENVIRON, dict) and all(isinstance(k, bytes) for k in RAW_ENVIRON)):
    RAW_ENVIRON = None


def current() -> Settings:
    """The settings now (the environment is read on every call; parsing is cached)."""
    if RAW_ENVIRON is not None:
        return _parse(tuple(map(RAW_ENVIRON.get, _RAW_KEYS)))
    return _parse(tuple(None if v is None else v.encode() for v in map(os.environ.get, _READ)))


@lru_cache(maxsize=32)
def _parse(raw) -> Settings:
    _check_names()
    algo, transport, min_bytes, model, timeout, validate = (
        None if v is None else os.fsdecode(v) for v in raw)
    return Settings(_forced(algo), (transport or "").strip().lower() or "cython",
                    _auto_min_bytes(min_bytes), _model(model), _timeout(timeout),
                    (validate or "0").strip().lower() in ("1", "true", "yes", "on"))


def algorithm(requested, settings=None) -> str:
    """The algorithm asked for: STRAGGLAR_ALGO, else ``requested``, else "auto"."""
    forced = (settings or current()).algo
    name = forced or (requested if requested is not None else "auto")
    if not isinstance(name, str) or name.lower() not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}; got {name!r}")
    return name.lower()


def _forced(raw):
    name = (raw or "").strip().lower()
    if name and name not in ALGORITHMS:
        raise ValueError(f"STRAGGLAR_ALGO must be one of {', '.join(ALGORITHMS)}; got {name!r}")
    return name


def _auto_min_bytes(raw):
    # Below a few MiB a round costs more than the bandwidth StragglAR saves (the
    # paper's own crossover on 8 GPUs is larger still); docs/BENCHMARKS.md.
    raw = "4194304" if raw is None else raw
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"STRAGGLAR_AUTO_MIN_BYTES must be an integer, got {raw!r}") from None


def _model(raw):
    """(alpha seconds, bandwidth bytes/s, margin[, alpha_inter, bandwidth_inter]) for ``auto``:
    STRAGGLAR_MODEL="1e-5,1e9,1.05", or with two more values for the links between nodes
    (without them, a communicator that spans nodes measures both tiers at setup).

    The default bandwidth is deliberately low (a loaded shared-memory node), so
    ``auto`` asks for a delay that surely hides the ReduceScatter; on a fast
    interconnect set it to the link speed.  ``margin``: StragglAR must win by this factor.
    """
    raw = "1e-5,1e9,1.05" if raw is None else raw
    try:
        values = tuple(float(x) for x in raw.split(","))
        if len(values) not in (3, 5):
            raise ValueError
    except ValueError:
        raise ValueError("STRAGGLAR_MODEL must be 'alpha,bandwidth,margin' or "
                         f"'alpha,bandwidth,margin,alpha_inter,bandwidth_inter', got {raw!r}") from None
    return values


def _timeout(raw):
    """Seconds to wait for late ranks (STRAGGLAR_TIMEOUT), or None: wait forever."""
    raw = (raw or "").strip()
    if not raw or raw.lower() in ("0", "off", "none"):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"STRAGGLAR_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"STRAGGLAR_TIMEOUT must be positive, got {raw!r}")
    return value


def model():
    return current().model


def timeout():
    return current().timeout
