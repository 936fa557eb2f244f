"""Reading a flight recorder's trace: ``python -m stragglar_mpi trace DIR``.

Under ``STRAGGLAR_TRACE=DIR`` every rank writes ``DIR/rank-<world rank, 5 digits>.jsonl``
(format 1): a header line, then its last Allreduce calls, oldest first.  This module reads
those files, lines up each communicator's calls by ``seq`` and says where the ranks first
disagree (who never arrived, who passed other arguments, who is a call behind, whose file
is missing), which calls did not return, or, when all agree, who was late most often.

Times in the records are on the communicator's clock (its rank 0's).  The header's
``written`` is local MPI_Wtime; a communicator entry may carry ``offset`` (local MPI_Wtime
minus its rank 0's, as ``decide/clock.offsets``) to put it on that clock; without one it is
taken as 0, exact for ranks on one node.  No MPI is needed here.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

FORMAT, VERSION = "stragglar_mpi trace", 1
FILE_NAME = re.compile(r"^rank-(\d{5})\.jsonl$")
HEADER_KEYS = ("rank", "size", "reason", "written", "comms")
CALL_KEYS = ("comm", "seq", "rank", "op", "count", "dtype", "arrived", "exited", "phase")
#: exit status of the ``trace`` command
AGREE, DISAGREE, BAD_INPUT = 0, 1, 2


class TraceError(ValueError):
    """A trace that cannot be read: no files, another format or version, a bad line."""


@dataclass(frozen=True)
class Call:
    """One Allreduce call of one rank, as its record says (times on the communicator's clock)."""
    comm: str
    seq: int
    rank: int
    op: str
    count: int
    dtype: str
    arrived: float
    exited: Optional[float]
    phase: str
    algorithm: Optional[str] = None
    straggler: Optional[int] = None
    phase1_end: Optional[float] = None
    first_message: Optional[float] = None
    pending: Optional[tuple] = None
    error: Optional[str] = None
    nbytes: Optional[int] = None

    @property
    def arguments(self) -> tuple:
        return (self.op, self.count, self.dtype)


@dataclass
class RankFile:
    """One rank's file: its header and its calls, oldest first."""
    path: str
    rank: int
    size: int
    reason: str
    written: float
    comms: dict
    host: str = "?"
    pid: Optional[int] = None
    calls: list = field(default_factory=list)

    def written_on(self, comm: str) -> float:
        """The write time on ``comm``'s clock (its rank 0's)."""
        return self.written - float(self.comms.get(comm, {}).get("offset", 0.0))


@dataclass
class Trace:
    """A trace directory: the files by world rank and the world size they name."""
    directory: str
    size: int
    files: dict

    @property
    def missing(self) -> list:
        return [r for r in range(self.size) if r not in self.files]

    def comms(self) -> dict:
        """Every communicator named in a header: ident -> its entry (name, size, world_ranks)."""
        found = {}
        for f in self.files.values():
            for ident, entry in f.comms.items():
                found.setdefault(ident, entry)
        return found

    def calls(self, comm: str) -> dict:
        """``comm``'s calls: seq -> {rank in comm: Call}."""
        merged = {}
        for f in self.files.values():
            for c in f.calls:
                if c.comm == comm:
                    merged.setdefault(c.seq, {})[c.rank] = c
        return merged

    def file_of(self, comm: str, rank: int) -> Optional[RankFile]:
        """The file of ``comm``'s rank ``rank``, or None."""
        world = self.comms()[comm]["world_ranks"][rank]
        return self.files.get(world)


# --------------------------------------------------------------------------- reading

def read(directory: str) -> Trace:
    """Every ``rank-NNNNN.jsonl`` in ``directory``; raises TraceError naming the bad file."""
    if not os.path.isdir(directory):
        raise TraceError(f"{directory}: no such directory")
    names = sorted(n for n in os.listdir(directory) if FILE_NAME.match(n))
    if not names:
        raise TraceError(f"{directory}: no trace files (rank-NNNNN.jsonl); "
                         "was the run started with STRAGGLAR_TRACE set to it?")
    files = {}
    for name in names:
        f = read_file(os.path.join(directory, name))
        if f.rank != int(FILE_NAME.match(name).group(1)):
            raise TraceError(f"{f.path}: its header says rank {f.rank}")
        files[f.rank] = f
    return Trace(directory, _one_size(files), files)


def read_file(path: str) -> RankFile:
    """One rank's file; raises TraceError naming ``path`` and the line."""
    with open(path) as stream:
        lines = [line for line in stream.read().splitlines() if line.strip()]
    if not lines:
        raise TraceError(f"{path}: empty file")
    rank_file = _header(path, _json(path, 1, lines[0]))
    rank_file.calls = [_call(path, n, _json(path, n, line)) for n, line in enumerate(lines[1:], 2)]
    return rank_file


def _json(path, number, line) -> dict:
    try:
        value = json.loads(line)
    except ValueError as e:
        raise TraceError(f"{path}:{number}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise TraceError(f"{path}:{number}: not a JSON object")
    return value


def _header(path, h) -> RankFile:
    if h.get("format") != FORMAT:
        raise TraceError(f"{path}: not a stragglar_mpi trace (format {h.get('format')!r})")
    if h.get("version") != VERSION:
        raise TraceError(f"{path}: trace format version {h.get('version')!r}; "
                         f"this stragglar_mpi reads version {VERSION}")
    _require(path, 1, h, HEADER_KEYS)
    return RankFile(path=path, rank=h["rank"], size=h["size"], reason=h["reason"],
                    written=h["written"], comms=h["comms"], host=h.get("host", "?"), pid=h.get("pid"))


def _call(path, number, r) -> Call:
    _require(path, number, r, CALL_KEYS)
    pending = r.get("pending")
    return Call(comm=r["comm"], seq=r["seq"], rank=r["rank"], op=r["op"], count=r["count"],
                dtype=r["dtype"], arrived=r["arrived"], exited=r["exited"], phase=r["phase"],
                algorithm=r.get("algorithm"), straggler=r.get("straggler"),
                phase1_end=r.get("phase1_end"), first_message=r.get("first_message"),
                pending=tuple(pending) if pending is not None else None,
                error=r.get("error"), nbytes=r.get("bytes"))


def _require(path, number, record, keys):
    absent = [k for k in keys if k not in record]
    if absent:
        raise TraceError(f"{path}:{number}: missing {', '.join(absent)}")


def _one_size(files) -> int:
    sizes = {f.size for f in files.values()}
    if len(sizes) > 1:
        said = ", ".join(f"{os.path.basename(f.path)} says {f.size}" for f in files.values())
        raise TraceError(f"files of different runs (world sizes differ: {said})")
    return sizes.pop()


# --------------------------------------------------------------------------- words

def ranks_text(ranks) -> str:
    """``[0, 1, 2, 5, 6]`` -> "ranks 0-2, 5, 6"; one rank -> "rank 3"."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs, start = [], ranks[0]
    for prev, cur in zip(ranks, ranks[1:] + [None]):
        if cur is None or cur != prev + 1:
            runs.append(f"{start}-{prev}" if prev - start >= 2 else ", ".join(map(str, range(start, prev + 1))))
            start = cur
    return "ranks " + ", ".join(runs)


def seconds_text(t: float) -> str:
    """A duration as a person reads it: 850 us, 12.3 ms, 4.20 s."""
    t = abs(t)
    if t < 1e-3:
        return f"{t * 1e6:.0f} us"
    return f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.2f} s"


def _arguments_text(args, with_op: bool) -> str:
    op, count, dtype = args
    return f"{op} of count {count} {dtype}" if with_op else f"count {count} {dtype}"


def _where(c: Call) -> str:
    """Where a call that did not return was: phase, algorithm, straggler, pending."""
    parts = [c.phase] if c.error is None else []
    if c.algorithm:
        parts.append(c.algorithm)
    if c.straggler is not None:
        parts.append(f"straggler {c.straggler}")
    if c.pending:
        parts.append(f"waiting on {ranks_text(c.pending)}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- the verdict

@dataclass
class Verdict:
    """What ``trace`` found: its lines, and whether the ranks disagree."""
    lines: list
    disagree: bool

    @property
    def status(self) -> int:
        return DISAGREE if self.disagree else AGREE


def verdict(trace: Trace) -> Verdict:
    """The first disagreement on each communicator, the calls that did not return, or, when
    the ranks agree, one line on how many calls and who was last most often."""
    lines = [f"no file from rank {r}: killed before it wrote?" for r in trace.missing]
    comms = trace.comms()
    for ident in sorted(comms, key=lambda i: comms[i]["name"]):
        lines += first_disagreement(trace, ident)
    lines += not_returned(trace)
    if lines:
        return Verdict(lines, True)
    return Verdict([agreement(trace)], False)


def first_disagreement(trace: Trace, comm: str) -> list:
    """Lines on the first call (by seq) of ``comm`` where its ranks disagree; [] if none."""
    calls = trace.calls(comm)
    members = _members_with_files(trace, comm)
    windows = {r: _window(calls, r) for r in members}
    for seq in sorted(calls):
        found = _absent(trace, comm, calls, windows, seq) + _arguments(trace, comm, calls, seq)
        if found:
            return found
    return []


def _members_with_files(trace, comm) -> list:
    world_ranks = trace.comms()[comm]["world_ranks"]
    return [r for r, w in enumerate(world_ranks) if w in trace.files]


def _window(calls, rank) -> tuple:
    """The seqs of ``rank``'s records: (oldest, newest), or None if it has none."""
    seqs = [s for s, by_rank in calls.items() if rank in by_rank]
    return (min(seqs), max(seqs)) if seqs else None


def _absent(trace, comm, calls, windows, seq) -> list:
    """Lines on the ranks that have no call ``seq`` though their ring would have kept it."""
    here = calls[seq]
    name = trace.comms()[comm]["name"]
    lines = []
    for rank, window in windows.items():
        if rank in here or (window is not None and window[0] > seq):
            continue                      # it made the call, or its ring dropped it
        last = calls.get(seq - 1, {}).get(rank) if window is not None else None
        who = _who(trace, comm, rank)
        if last is not None and last.exited is None:
            lines.append(_behind(who, last, here, name))
        else:
            lines.append(f"{who} never arrived at call {seq} on {name} ({_its_last(last, here)})")
    return lines


def _its_last(last, here) -> str:
    """How the absent rank's previous call ended, against the others' arrival at the next."""
    if last is None:
        return "no call there in its file before it"
    if last.error is not None:
        return f"its last call there, {last.seq}, failed: {last.error}"
    gap = _first_arrival(here) - last.exited
    return (f"its last call there, {last.seq}, returned {seconds_text(gap)} "
            f"{'before' if gap >= 0 else 'after'} the first rank arrived at {last.seq + 1}")


def _behind(who, last, here, name) -> str:
    return (f"{who} is a call behind on {name}: still in call {last.seq} ({_where(last)}) "
            f"while {ranks_text(here)} {'is' if len(here) == 1 else 'are'} in call {last.seq + 1}")


def _first_arrival(by_rank) -> float:
    return min(c.arrived for c in by_rank.values())


def _who(trace, comm, rank) -> str:
    """"rank 2", or "rank 1 (world 3)" on a communicator whose ranks are not the world's."""
    world = trace.comms()[comm]["world_ranks"][rank]
    return f"rank {rank}" if world == rank else f"rank {rank} (world {world})"


def _arguments(trace, comm, calls, seq) -> list:
    """Lines on the ranks whose op, count or datatype at ``seq`` differ from the most ranks'."""
    here = calls[seq]
    groups = {}
    for rank in sorted(here):
        groups.setdefault(here[rank].arguments, []).append(rank)
    if len(groups) < 2:
        return []
    usual = max(groups, key=lambda a: (len(groups[a]), -groups[a][0]))
    name = trace.comms()[comm]["name"]
    with_op = len({args[0] for args in groups}) > 1
    lines = []
    for args, ranks in groups.items():
        if args == usual:
            continue
        shift = _shift(calls, ranks, groups[usual], seq)
        lines.append(_shifted(trace, comm, ranks, shift, seq, name) if shift else
                     f"{ranks_text(ranks)} passed {_arguments_text(args, with_op)} at call {seq} on {name}, "
                     f"{ranks_text(groups[usual])} passed {_arguments_text(usual, with_op)}")
    return lines


def _shift(calls, odd, usual, seq) -> int:
    """+1 if ``odd``'s call s is ``usual``'s s + 1 from ``seq`` on (they skipped a call), -1 if
    it is their s - 1 (one extra call), 0 if neither explains the difference."""
    reference = usual[0]
    for shift in (1, -1):
        pairs = [(calls[s][r].arguments, calls[s + shift][reference].arguments)
                 for s in sorted(calls) if s >= seq for r in odd
                 if r in calls[s] and reference in calls.get(s + shift, {})]
        if len(pairs) >= 2 and all(a == b for a, b in pairs):     # one pair proves nothing
            return shift
    return 0


def _shifted(trace, comm, ranks, shift, seq, name) -> str:
    who = ", ".join(_who(trace, comm, r) for r in ranks)
    if shift == 1:
        return (f"{who} is a call behind on {name}: it skipped call {seq} "
                f"(its call {seq} has the arguments of the others' call {seq + 1})")
    return (f"{who} made an extra call on {name} before call {seq} "
            f"(its call {seq + 1} has the arguments of the others' call {seq})")


def not_returned(trace: Trace) -> list:
    """A line per group of ranks whose call failed or had not returned when the file was written."""
    groups = {}
    for f in trace.files.values():
        for c in f.calls:
            if c.exited is None or c.error is not None:
                key = (c.comm, c.seq, _where(c), c.error, f.reason)
                groups.setdefault(key, []).append((c.rank, f.written_on(c.comm) - c.arrived))
    comms = trace.comms()
    return [_not_returned_line(comms[key[0]]["name"], key, found) for key, found in sorted(groups.items())]


def _not_returned_line(name, key, found) -> str:
    _, seq, where, error, reason = key
    ranks = ranks_text([r for r, _ in found])
    if error is not None:
        return f"{ranks} failed in call {seq} on {name} ({where}): {error}"
    waits = sorted(w for _, w in found)
    shortest, longest = seconds_text(waits[0]), seconds_text(waits[-1])
    waited = shortest if shortest == longest else f"{shortest} to {longest}"
    return (f"{ranks} did not return from call {seq} on {name} ({where}); "
            f"waiting {waited} when written ({reason})")


def agreement(trace: Trace) -> str:
    """One line: the ranks agree on N calls on M communicators; who was last most often."""
    comms = trace.comms()
    total = sum(len(trace.calls(ident)) for ident in comms)
    line = (f"all {trace.size} ranks agree: {total} call{'s' * (total != 1)} on "
            f"{len(comms)} communicator{'s' * (len(comms) != 1)}")
    last = last_most_often(trace)
    return line + (f"; last most often: {last}" if last else "")


def last_most_often(trace: Trace) -> str:
    """"rank 3 (world 3) in 18 of 20 calls on MPI_COMM_WORLD, p50 12.3 ms after the others"
    for the communicator with most calls, or "" when it has no call every rank recorded."""
    comms = trace.comms()
    if not comms:
        return ""
    ident = max(comms, key=lambda i: (len(trace.calls(i)), comms[i]["name"]))
    whole = [c for c in trace.calls(ident).values() if len(c) == comms[ident]["size"]]
    if not whole:
        return ""
    lasts = [max(c.values(), key=lambda call: call.arrived) for c in whole]
    rank, times = Counter(c.rank for c in lasts).most_common(1)[0]
    lateness = [_lateness(c, c[rank].arrived) for c in whole
                if max(c.values(), key=lambda call: call.arrived).rank == rank]
    return (f"{_who(trace, ident, rank)} in {times} of {len(whole)} calls on {comms[ident]['name']} "
            f"({100 * times / len(whole):.0f}%), p50 {seconds_text(statistics.median(lateness))} "
            f"after the next-to-last")


def _lateness(by_rank, last) -> float:
    """How much later than the second-to-last rank the last one arrived."""
    earlier = sorted(c.arrived for c in by_rank.values())[:-1]
    return last - earlier[-1] if earlier else 0.0


# --------------------------------------------------------------------------- the command

def main(directory: str, out=None) -> int:
    """``python -m stragglar_mpi trace DIR``: print the verdict, each line in one write;
    0 if the ranks agree, 1 if not (or a call failed or did not return), 2 on bad input."""
    out = out or sys.stdout
    try:
        found = verdict(read(directory))
    except TraceError as e:
        sys.stderr.write(f"trace: {e}\n")
        return BAD_INPUT
    for line in found.lines:
        out.write(line + "\n")
        out.flush()
    return found.status
