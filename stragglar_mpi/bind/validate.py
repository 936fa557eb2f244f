"""STRAGGLAR_VALIDATE: every rank checks that all ranks passed the same arguments.

Whatever the check raises on one rank, that rank still takes part in the exchange, so
no rank is left waiting, and every rank raises an error that names the ranks.
"""
from __future__ import annotations

import json

import numpy as np

from ..core import tags
from ..core.errors import Pending
from ..core.exchange import Exchange, wait

_SLOT = 256   # bytes per rank in the first exchange: an 8-byte length, then the text if it fits
_FIELDS = ("algorithm", "straggler", "in place", "count", "datatype size", "datatype", "op")
_PHASE = "the argument check (STRAGGLAR_VALIDATE)"


def same_everywhere(state, check, deadline):
    """Run ``check`` on every rank and compare the results (the ``signature`` of its Args);
    raise the same error everywhere."""
    try:
        args, error = check(), None
    except Exception as exc:      # any type: mpi4py raises KeyError for some specs
        args, error = None, exc
    mine = ["error", _describe(error)] if error is not None else list(args.signature)
    everyone = _allgather_values(state.private, mine, deadline)
    problem = _mismatch(everyone)
    if error is not None:
        raise error
    if problem:
        raise ValueError(f"stragglar_mpi: Allreduce arguments differ across ranks: {problem}")
    return args


def _describe(error):
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:
        return type(error).__name__


def _allgather_values(comm, value, deadline):
    """Every rank's ``value`` (JSON), in rank order: a fixed-size exchange, and one of the
    full texts only when one does not fit (any length)."""
    n, text = comm.Get_size(), json.dumps(value).encode()
    head = np.zeros(_SLOT, np.uint8)
    head[:8] = np.frombuffer(np.int64(len(text)).tobytes(), np.uint8)
    head[8:8 + len(text)] = np.frombuffer(text[:_SLOT - 8], np.uint8)
    heads = _allgather(comm, head, [_SLOT] * n, deadline)
    lengths = [int(np.frombuffer(bytes(h[:8]), np.int64)[0]) for h in heads]
    if max(lengths) <= _SLOT - 8:
        texts = [bytes(h[8:8 + k]) for h, k in zip(heads, lengths)]
    else:
        texts = [bytes(t) for t in _allgather(comm, np.frombuffer(text, np.uint8), lengths, deadline)]
    return [json.loads(t) for t in texts]


def _allgather(comm, mine, sizes, deadline):
    """Every rank's bytes (``sizes[r]`` from rank r).  Under a deadline the exchange is
    point to point, so that a rank that does not come is named."""
    n, rank = comm.Get_size(), comm.Get_rank()
    if not deadline:
        whole = np.empty(sum(sizes), np.uint8)
        wait([comm.Iallgatherv(mine, [whole, sizes])])
        return np.split(whole, np.cumsum(sizes)[:-1])
    got = [np.empty(k, np.uint8) for k in sizes]
    got[rank][:] = mine
    others = [r for r in range(n) if r != rank]
    exchange = Exchange(comm, others, tags.validate(), mine, [got[r] for r in others])
    missing = exchange.silent(deadline)
    if missing:
        exchange.cancel()
        raise Pending(missing, _PHASE, missing=missing)
    return got


def _mismatch(everyone):
    """A readable account of what differs, naming the ranks; '' when all agree."""
    errors = [f"rank {r}: {v[1]}" for r, v in enumerate(everyone) if v[0] == "error"]
    if errors:
        return "bad arguments on " + "; ".join(errors)
    parts = []
    for i, field in enumerate(_FIELDS):
        seen = {}
        for rank, v in enumerate(everyone):
            seen.setdefault(v[i], []).append(rank)
        if len(seen) > 1:
            show = str if field == "op" else repr
            groups = "; ".join(f"ranks {_ranges(r)}: {show(val)}" for val, r in seen.items())
            parts.append(f"{field} ({groups})")
    return ", ".join(parts)


def _ranges(ranks):
    return ",".join(map(str, ranks)) if len(ranks) < 6 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"
