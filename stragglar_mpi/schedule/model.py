"""The schedule as data: frozen transfers grouped in rounds, with a JSON round trip.

A schedule splits the buffer into ``chunks`` contiguous pieces (as equal as
possible, the first ``count % chunks`` pieces one element longer) and lists, round
by round, which rank sends which chunk to which rank.  ``reduce=True`` means the
receiver combines the incoming chunk with its own; ``reduce=False`` means it
overwrites its copy.  Transfers of one round read the state at the start of the
round.  Transfers between the same pair of ranks in one round travel as one
message, so they use one port.
"""
from __future__ import annotations

import contextlib
import gc
import json
from dataclasses import dataclass, field
from typing import NamedTuple


class ScheduleError(ValueError):
    """A schedule is malformed or does not implement AllReduce."""


@dataclass(frozen=True, order=True, init=False)
class Transfer:
    src: int
    dst: int
    chunk: int
    reduce: bool = False

    def __init__(self, src: int, dst: int, chunk: int, reduce: bool = False):
        # Writing the instance dict directly skips the frozen __setattr__ guard:
        # twice as fast as the generated __init__, and schedules hold ~n^2 transfers.
        d = self.__dict__
        d["src"] = src
        d["dst"] = dst
        d["chunk"] = chunk
        d["reduce"] = reduce

    def __str__(self) -> str:
        arrow = "=>" if self.reduce else "->"
        return f"c{self.chunk}:{self.src}{arrow}{self.dst}"

    def to_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "chunk": self.chunk, "reduce": self.reduce}


@dataclass(frozen=True)
class Schedule:
    algorithm: str
    n: int
    straggler: int | None
    chunks: int
    rounds: tuple[tuple[Transfer, ...], ...] = field(default=())
    owners: tuple[int, ...] = ()   # "hierarchical", "reduce_to_owners": chunk c's rank after phase 1

    def __post_init__(self):
        rounds = tuple(tuple(r) for r in self.rounds)
        object.__setattr__(self, "rounds", rounds)
        object.__setattr__(self, "owners", tuple(self.owners))

    @property
    def early(self) -> tuple[int, ...]:
        """Ranks other than the straggler, in rank order (early rank i owns chunk i)."""
        return tuple(r for r in range(self.n) if r != self.straggler)

    def relabel(self, mapping) -> "Schedule":
        """The same schedule with rank ``r`` renamed ``mapping[r]``."""
        rounds = tuple(
            tuple(Transfer(mapping[t.src], mapping[t.dst], t.chunk, t.reduce) for t in rnd)
            for rnd in self.rounds
        )
        straggler = None if self.straggler is None else mapping[self.straggler]
        return Schedule(self.algorithm, self.n, straggler, self.chunks, rounds,
                        tuple(mapping[r] for r in self.owners))

    def to_dict(self) -> dict:
        d = {
            "algorithm": self.algorithm,
            "n": self.n,
            "straggler": self.straggler,
            "chunks": self.chunks,
            "rounds": [[t.to_dict() for t in rnd] for rnd in self.rounds],
        }
        if self.owners:
            d["owners"] = list(self.owners)
        return d

    def to_json(self, indent=None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict) -> "Schedule":
        try:
            rounds = tuple(
                tuple(Transfer(int(t["src"]), int(t["dst"]), int(t["chunk"]), bool(t["reduce"]))
                      for t in rnd)
                for rnd in d["rounds"]
            )
            straggler = d.get("straggler")
            return cls(str(d["algorithm"]), int(d["n"]),
                       None if straggler is None else int(straggler), int(d["chunks"]), rounds,
                       tuple(int(r) for r in d.get("owners", ())))
        except (KeyError, TypeError) as exc:
            raise ScheduleError(f"malformed schedule JSON: {exc!r}") from exc

    @classmethod
    def from_json(cls, text: str) -> "Schedule":
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        head = (f"{self.algorithm} n={self.n} straggler={self.straggler} "
                f"chunks={self.chunks} rounds={len(self.rounds)}")
        lines = [head] + [
            f"  R{i}: " + " ".join(str(t) for t in sorted(rnd, key=lambda t: (t.src, t.dst)))
            for i, rnd in enumerate(self.rounds)
        ]
        return "\n".join(lines)


class CopyBlock(NamedTuple):
    """Rounds ``first``, ``first + 1``, ... of a canonical StragglAR schedule (straggler
    n-1) as copy columns: round ``first + k`` copies chunk[i] from src[i] to dst[i] for
    i in ``starts[k]:starts[k + 1]``; round t < n-1 also holds the exchange of chunk t
    between early rank t and the straggler, implied.  NumPy arrays."""
    first: int
    starts: object
    src: object
    dst: object
    chunk: object

    @classmethod
    def of_round(cls, t: int, src, dst, chunk) -> "CopyBlock":
        import numpy as np
        return cls(t, np.array([0, len(src)], dtype=np.int64), src, dst, chunk)

    @property
    def count(self) -> int:
        """How many rounds."""
        return len(self.starts) - 1

    def round(self, k: int):
        """Round ``first + k`` as (src, dst, chunk) views."""
        lo, hi = int(self.starts[k]), int(self.starts[k + 1])
        return self.src[lo:hi], self.dst[lo:hi], self.chunk[lo:hi]

    def rounds(self):
        return (self.round(k) for k in range(self.count))

    def int64_columns(self):
        """(starts, src, dst, chunk) as contiguous int64 arrays (copies only if needed)."""
        import numpy as np
        return tuple(np.ascontiguousarray(col, dtype=np.int64)
                     for col in (self.starts, self.src, self.dst, self.chunk))


#: A block of copy rounds holds about this many copies (64 rounds at n=4096: 6 MiB).
BLOCK_COPIES = 1 << 18


def copy_blocks_of(rounds):
    """(src, dst, chunk) columns per round, from round 0 on, as ``CopyBlock``s of about
    ``BLOCK_COPIES`` copies each."""
    part, held, first = [], 0, 0
    for cols in rounds:
        part.append(cols)
        held += len(cols[0])
        if held >= BLOCK_COPIES:
            yield _merged(first, part)
            first, part, held = first + len(part), [], 0
    if part:
        yield _merged(first, part)


def _merged(first: int, rounds) -> CopyBlock:
    import numpy as np
    starts = np.cumsum([0] + [len(src) for src, _, _ in rounds])
    columns = (np.concatenate([cols[k] for cols in rounds]).astype(np.int64, copy=False)
               for k in range(3))
    return CopyBlock(first, starts, *columns)


def chunk_bounds(count: int, chunks: int) -> list[tuple[int, int]]:
    """(offset, length) in elements of each chunk of a ``count``-element buffer."""
    base, extra = divmod(count, chunks)
    bounds, off = [], 0
    for c in range(chunks):
        length = base + (1 if c < extra else 0)
        bounds.append((off, length))
        off += length
    return bounds


@contextlib.contextmanager
def gc_paused():
    """Schedules are ~n^2 small objects: cyclic GC passes over them while they are
    built would dominate the time, and they hold no reference cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
