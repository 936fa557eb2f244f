"""STRAGGLAR_VALIDATE: every rank checks that all ranks passed the same arguments.

Whatever the check raises on one rank, that rank still takes part in the exchange, so
no rank is left waiting, and every rank raises an error that names the ranks.
``same_everywhere`` is a generator (core/steps.py): its driver waits for the exchange.
A blocking call without a deadline gathers with one collective on the private duplicate
(in its turn: core/turns.py ``Turn``); under a deadline, and in a nonblocking operation,
the exchange is point to point with the call's sequence's tag, so that operations in
flight never meet and a rank that does not come is named.
"""
from __future__ import annotations

import json

import numpy as np

from ..core import tags
from ..core.errors import Pending
from ..core.exchange import Exchange
from ..core.collective import issue
from ..core.steps import complete

_SLOT = 256   # bytes per rank in the first exchange: an 8-byte length, then the text if it fits
_FIELDS = ("algorithm", "straggler", "in place", "count", "datatype size", "datatype", "op")
_PHASE = "the argument check (STRAGGLAR_VALIDATE)"


def same_everywhere(seq, check, deadline, turn):
    """Generator: run ``check`` on every rank and compare the results (the ``signature``
    of its Args); raise the same error everywhere.  ``seq``: the call's sequence."""
    try:
        args, error = check(), None
    except Exception as exc:      # any type: mpi4py raises KeyError for some specs
        args, error = None, exc
    mine = ["error", _describe(error)] if error is not None else list(args.signature)
    everyone = yield from _allgather_values(seq, mine, deadline, turn)
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


def _allgather_values(seq, value, deadline, turn):
    """Generator: every rank's ``value`` (JSON), in rank order: a fixed-size exchange, and
    one of the full texts only when one does not fit (any length)."""
    n, text = seq.private.Get_size(), json.dumps(value).encode()
    head = np.zeros(_SLOT, np.uint8)
    head[:8] = np.frombuffer(np.int64(len(text)).tobytes(), np.uint8)
    head[8:8 + len(text)] = np.frombuffer(text[:_SLOT - 8], np.uint8)
    heads = yield from _allgather(seq, head, [_SLOT] * n, deadline, turn)
    lengths = [int(np.frombuffer(bytes(h[:8]), np.int64)[0]) for h in heads]
    if max(lengths) <= _SLOT - 8:
        texts = [bytes(h[8:8 + k]) for h, k in zip(heads, lengths)]
    else:
        texts = [bytes(t) for t in (yield from _allgather(seq, np.frombuffer(text, np.uint8), lengths,
                                                          deadline, turn))]
    return [json.loads(t) for t in texts]


def _allgather(seq, mine, sizes, deadline, turn):
    """Generator: every rank's bytes (``sizes[r]`` from rank r)."""
    comm = seq.private
    n, rank = comm.Get_size(), comm.Get_rank()
    if n == 1:                   # nothing to exchange (a wait for no message would last the deadline)
        return [np.array(mine, np.uint8)]
    if not deadline and turn.blocking:
        whole = np.empty(sum(sizes), np.uint8)
        request = yield from issue(turn, lambda: comm.Iallgatherv(mine, [whole, sizes]))
        yield from complete([request])
        return np.split(whole, np.cumsum(sizes)[:-1])
    got = [np.empty(k, np.uint8) for k in sizes]
    got[rank][:] = mine
    others = [r for r in range(n) if r != rank]
    exchange = Exchange(comm, others, tags.validate(seq.index), mine, [got[r] for r in others])
    if not (yield from complete(exchange.recvs + exchange.sends, deadline)):
        missing = [r for r, live in zip(others, exchange.unanswered()) if live]
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
