"""Every knob in one place: read once into a frozen ``Settings``, typos refused.

The environment is read at the first call that needs the settings (the first
``Allreduce``), or again by ``configure()``; changing a ``STRAGGLAR_*`` variable
later in the job has no effect until ``configure()`` is called (on every rank, at
the same point between calls).  An unknown ``STRAGGLAR_*`` name, or a value
outside the accepted ones, raises ``ValueError`` naming the variable; the bad
settings are not kept, so every later call raises the same until they are fixed.

``KNOBS`` is the one list of variables: docs/SETTINGS.md's table, ``Settings``' fields
and the checks all come from it.
"""
from __future__ import annotations

import math
import os
import threading
from array import array
from dataclasses import dataclass, field, fields
from typing import Callable

from ..schedule.algorithms import AUTO, CHOICES as ALGORITHMS
from .errors import did_you_mean
PREFIX = "STRAGGLAR_"


@dataclass(frozen=True)
class Knob:
    """One environment variable: the Settings field it fills and how its text is read."""
    name: str
    field: str
    default: str
    parse: Callable[[str, str], object]   # (variable name, text) -> value, or ValueError
    meaning: str


def _error(name, raw, accepted):
    return ValueError(f"stragglar_mpi: {name}={raw!r} is not accepted; expected {accepted}")


def _number(name, raw, accepted, text=None):
    """A finite float from ``text`` (default ``raw``); errors quote all of ``raw``."""
    try:
        value = float(raw if text is None else text)
    except ValueError:
        raise _error(name, raw, accepted) from None
    if not math.isfinite(value):
        raise _error(name, raw, accepted)
    return value


def _algo(name, raw):
    text = raw.strip().lower()
    if text and text not in ALGORITHMS:
        raise _error(name, raw, f"one of {', '.join(ALGORITHMS)} (or unset)")
    return text


def _whole(least, unit):
    def parse(name, raw):
        accepted = f"a whole number of {unit} >= {least}"
        try:
            value = int(raw.strip())
        except ValueError:
            raise _error(name, raw, accepted) from None
        if value < least:
            raise _error(name, raw, accepted)
        return value
    return parse


def _bytes(least):
    return _whole(least, "bytes")


def _model(name, raw):
    """(alpha seconds, bandwidth bytes/s, margin[, alpha_inter, bandwidth_inter]) for ``auto``;
    without the last two, a communicator that spans nodes measures both tiers at setup."""
    accepted = ("'alpha,bandwidth,margin' or 'alpha,bandwidth,margin,alpha_inter,bandwidth_inter': "
                "alphas >= 0 seconds, bandwidths > 0 bytes/s, margin > 0")
    parts = raw.split(",")
    if len(parts) not in (3, 5):
        raise _error(name, raw, accepted)
    values = tuple(_number(name, raw, accepted, p) for p in parts)
    alphas, bandwidths = values[0::3], values[1::3]
    if min(alphas) < 0 or min(bandwidths) <= 0 or values[2] <= 0:
        raise _error(name, raw, accepted)
    return values


def _timeout(name, raw):
    """Seconds to wait for late ranks, or None: wait forever."""
    text = raw.strip().lower()
    if text in ("", "0", "off", "none"):
        return None
    accepted = "a positive, finite number of seconds, or 0/off"
    value = _number(name, raw, accepted)
    if value <= 0:
        raise _error(name, raw, accepted)
    return value


def _folder(name, raw):
    """A folder to write into: made if missing; a path that is a file is refused."""
    text = raw.strip()
    if text and os.path.exists(text) and not os.path.isdir(text):
        raise _error(name, raw, "a folder (this path is a file)")
    return os.path.abspath(text) if text else ""


def _flag(name, raw):
    text = raw.strip()
    if text not in ("0", "1"):
        raise _error(name, raw, "0 or 1")
    return text == "1"


def _detected_or_flag(name, raw):
    return None if not raw.strip() else _flag(name, raw)


KNOBS = (
    Knob("STRAGGLAR_ALGO", "algo", "", _algo,
         "force an algorithm: `stragglar`, `hierarchical`, `hring`, `ring`, `rhd`, `direct`, `native`, `auto`; "
         "overrides `algorithm=` (as `NCCL_ALGO` does)"),
    # Below a few MiB a round costs more than the bandwidth StragglAR saves (the
    # paper's own crossover on 8 GPUs is larger still); docs/BENCHMARKS.md.
    Knob("STRAGGLAR_AUTO_MIN_BYTES", "auto_min_bytes", "4194304", _bytes(0),
         "`auto` takes the native AllReduce below this many bytes and records nothing"),
    # The default bandwidth is deliberately low (a loaded shared-memory node), so
    # `auto` asks for a delay that surely hides the ReduceScatter.
    Knob("STRAGGLAR_MODEL", "model", "1e-5,1e9,1.05", _model,
         "`auto`'s cost model: `alpha_seconds,bandwidth_bytes_per_s,margin`, optionally "
         "`,alpha_inter,bandwidth_inter` for the links between nodes (else measured at setup); "
         "set the bandwidth to your links"),
    # The model prices links and knows no CPUs: measured, its choice lost on a loaded
    # machine (issue 24, docs/BENCHMARKS.md); decide/tuning.py.
    Knob("STRAGGLAR_AUTO_MEASURE", "auto_measure", "1", _flag,
         "`1`: `auto` times the candidates its cost model leaves (the synchronous AllReduces, and a "
         "straggler-aware one when the model expects the delay to pay) and runs the fastest; "
         "`0`: it runs the model's choice"),
    Knob("STRAGGLAR_TIMEOUT", "timeout", "off", _timeout,
         "seconds a call waits for late ranks before `StragglerTimeout`"),
    # A late rank is what this library is for, so waiting is never an error by default;
    # a wait this long is worth a line on stderr (call/watchdog.py).
    Knob("STRAGGLAR_STALL_WARN", "stall_warn", "60", _timeout,
         "seconds a call waits before each waiting rank warns on stderr, once, naming the ranks "
         "not in the call yet (`0`: no warnings)"),
    Knob("STRAGGLAR_TRACE", "trace", "", _folder,
         "a folder: each rank writes its flight record there (`rank-NNNNN.jsonl`) at a timeout, "
         "a failed call, the first stall warning and exit; read it with `python -m stragglar_mpi trace`"),
    Knob("STRAGGLAR_VALIDATE", "validate", "0", _flag,
         "`1`: compare every call's arguments across ranks"),
    Knob("STRAGGLAR_REPORT", "report", "0", _flag,
         "`1`: rank 0 prints the straggler report of every communicator at exit"),
    Knob("STRAGGLAR_CUDA_AWARE", "cuda_aware", "", _detected_or_flag,
         "`0`/`1`: override the detection of a CUDA-aware MPI (unset: detected)"),
    Knob("STRAGGLAR_CUDA_PIECE_BYTES", "cuda_piece_bytes", "4194304", _bytes(1),
         "largest single host-device copy when device buffers are staged through host memory"),
    # Below it a notice to every rank costs fewer rounds of latency than the groups'
    # reports, tree and record rounds (docs/ARRIVAL.md, measured); rank 0's value counts.
    Knob("STRAGGLAR_ARRIVAL_GROUPS", "arrival_groups", "16", _whole(2, "ranks"),
         "communicators of at least this many ranks track arrivals through groups and "
         "aggregators (O(log n) messages a rank and call); smaller ones send a notice to every rank"),
    Knob("STRAGGLAR_EXIT_TIMEOUT", "exit_timeout", "60", _timeout,
         "seconds the exit waits for nonblocking operations still pending; past it they are "
         "printed and the process exits with status 1 instead of hanging the job (`off`: no bound)"),
)
KNOWN = frozenset(k.name for k in KNOBS)


@dataclass(frozen=True)
class Settings:
    """The knobs, as read by one ``configure()``; ``epoch`` counts the reads."""
    algo: str                    # "" or a forced algorithm
    auto_min_bytes: int
    model: tuple                 # (alpha s, bandwidth B/s, margin[, alpha_inter s, bandwidth_inter B/s])
    auto_measure: bool           # auto measures its candidates (decide/tuning.py)
    timeout: float | None
    stall_warn: float | None     # seconds before a stall warning (call/watchdog.py), None: never
    trace: str                   # the flight record's folder (call/flight.py), "": none
    validate: bool
    report: bool
    cuda_aware: bool | None      # None: ask the MPI library
    cuda_piece_bytes: int
    arrival_groups: int          # ranks from which arrival uses groups (decide/arrival.py)
    exit_timeout: float | None   # the bound on the exit's wait for pending operations
    epoch: int = field(default=0, compare=False)


assert [f.name for f in fields(Settings)][:-1] == [k.field for k in KNOBS]

_current: Settings | None = None
_epoch = 0
#: The epoch of the settings in force, -1 while none are valid: a cell that the compiled
#: entry reads in C on every call (its bindings carry the epoch they were made in).
EPOCH = array("q", [-1])
_lock = threading.Lock()


def read(environ=None, epoch=0) -> Settings:
    """Settings from ``environ`` (default ``os.environ``); raises for unknown names and bad values."""
    env = os.environ if environ is None else environ
    unknown = sorted(k for k in env if k.startswith(PREFIX) and k not in KNOWN)
    if unknown:
        raise ValueError(f"stragglar_mpi: unknown environment variable(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(KNOWN))}")
    values = {k.field: k.parse(k.name, env.get(k.name, k.default)) for k in KNOBS}
    return Settings(**values, epoch=epoch)


def configure(environ=None) -> Settings:
    """Read the settings again (call it on every rank); returns them.

    Calls already bound to earlier settings see the new ones: the epoch changes, and
    every binding of the compiled entry carries the epoch it was made in (the entry
    reads ``EPOCH`` at each call; -1 while a read is under way or failed).
    """
    global _current, _epoch
    with _lock:
        _epoch += 1
        _current, EPOCH[0] = None, -1    # a bad read leaves nothing behind: later calls raise too
        _current = read(environ, _epoch)
        EPOCH[0] = _epoch
        return _current


def current() -> Settings:
    """The settings in force, read from the environment on first use; on the progress
    thread, those of the operation it runs (``pin``): what a call means is fixed at the call."""
    settings = getattr(_pinned, "settings", None) or _current
    return settings if settings is not None else configure()


_pinned = threading.local()


def pin(settings):
    """Make ``settings`` (None: the ones in force) what ``current()`` returns in this
    thread; returns what was pinned before."""
    before = getattr(_pinned, "settings", None)
    _pinned.settings = settings
    return before


def algorithm(requested, settings=None) -> str:
    """The algorithm asked for: STRAGGLAR_ALGO, else ``requested``, else "auto"."""
    forced = (settings or current()).algo
    name = forced or (requested if requested is not None else AUTO)
    if not isinstance(name, str) or name.lower() not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}; got {name!r}"
                         + did_you_mean(name, ALGORITHMS))
    return name.lower()


def model():
    return current().model


def exit_timeout():
    """STRAGGLAR_EXIT_TIMEOUT, or its default where the settings do not read: the exit
    is bounded all the same."""
    try:
        return current().exit_timeout
    except ValueError:
        return read({}).exit_timeout


def table() -> str:
    """docs/SETTINGS.md's table of settings, from ``KNOBS``."""
    rows = ["| variable | meaning | default |", "|---|---|---|"]
    for k in KNOBS:
        default = f"`{k.default}`" if k.default else "unset"
        rows.append(f"| `{k.name}` | {k.meaning} | {default} |")
    return "\n".join(rows)
