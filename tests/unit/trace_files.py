"""Synthetic STRAGGLAR_TRACE directories (format 1) for the trace and timeline tests.

``calls(size, n)`` makes every rank's records of n StragglAR calls on one communicator, with
rank ``straggler`` late by ``delay`` s; a test changes them (drops, edits) and ``write``s
them.  Times are on one clock from 100.0 s, one call every 50 ms.
"""
import json
from pathlib import Path

WORLD = "c0"


def header(rank, size, reason="exit", written=None, comms=None):
    comms = comms or {WORLD: {"name": "MPI_COMM_WORLD", "size": size, "rank": rank,
                              "world_ranks": list(range(size))}}
    return {"format": "stragglar_mpi trace", "version": 1, "rank": rank, "size": size,
            "host": "node0", "pid": 1000 + rank, "reason": reason, "written": written, "comms": comms}


def record(seq, rank, arrived, exited, comm=WORLD, count=1 << 20, dtype="float32", op="SUM",
           algorithm="stragglar", straggler=None, phase1_end=None, first_message=None,
           phase="done", pending=None, error=None):
    return {"comm": comm, "seq": seq, "rank": rank, "op": op, "count": count, "dtype": dtype,
            "bytes": count * 4, "algorithm": algorithm, "straggler": straggler, "arrived": arrived,
            "phase1_end": phase1_end, "first_message": first_message, "exited": exited,
            "phase": phase, "pending": pending, "error": error}


def one_call(seq, size, straggler, delay, start):
    """Every rank's record of one StragglAR call that finished."""
    arrived = {r: start + 0.0004 * r + (delay if r == straggler else 0.0) for r in range(size)}
    phase1_end = max(t for r, t in arrived.items() if r != straggler) + 0.006
    first = arrived[straggler] + 0.0003
    return {r: record(seq, r, arrived[r], first + 0.004 + 0.0002 * r, straggler=straggler,
                      phase1_end=None if r == straggler else phase1_end, first_message=first)
            for r in range(size)}


def calls(size=4, n=10, straggler=None, delay=0.012):
    """rank -> its records, oldest first: n calls, all agreeing."""
    straggler = size - 1 if straggler is None else straggler
    by_rank = {r: [] for r in range(size)}
    for seq in range(1, n + 1):
        for r, rec in one_call(seq, size, straggler, delay, 100.0 + 0.05 * seq).items():
            by_rank[r].append(rec)
    return by_rank


def hang(records, reason="timeout", after=1.5, pending=None):
    """Mark the last record of each rank's list open (not returned), as at a timeout."""
    for recs in records.values():
        if recs:
            last = recs[-1]
            last.update(exited=None, phase="phase 1" if last["first_message"] is None else "phase 2",
                        pending=pending)
    return records


def write(directory, records, size=None, reason="exit", written=None, skip=(), headers=None):
    """One file per rank of ``records`` (rank -> records) but those in ``skip``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    size = size or len(records)
    end = max(max(r["arrived"], r["exited"] or 0) for recs in records.values() for r in recs)
    for rank, recs in records.items():
        if rank in skip:
            continue
        head = (headers or {}).get(rank) or header(rank, size, reason, written or end + 0.001)
        lines = [json.dumps(head)] + [json.dumps(r) for r in recs]
        (directory / f"rank-{rank:05d}.jsonl").write_text("\n".join(lines) + "\n")
    return directory


# --------------------------------------------------------------------------- the cases

def agree(directory):
    """30 calls, rank 3 late by 12 ms in each."""
    return write(directory, calls(4, 30))


def never_arrived(directory):
    """Rank 2 returned from call 6 and never came to 7; the others timed out in 7."""
    recs = calls(4, 7)
    recs[2] = recs[2][:6]
    for r in (0, 1, 3):       # 0 and 1 wait for 2 in phase 1; 3 for the first message of phase 2
        recs[r][-1].update(exited=None, phase="phase 2" if r == 3 else "phase 1", pending=[2],
                           phase1_end=None, first_message=None)
    return write(directory, recs, reason="timeout", written=recs[0][-1]["arrived"] + 30)


def other_count(directory):
    """Rank 3 passed count 1000 at call 8; every rank's call 8 raised."""
    recs = calls(4, 8)
    recs[3][-1]["count"] = 1000
    for r in range(4):
        recs[r][-1].update(phase="failed", error="Mismatch: counts differ across ranks")
    return write(directory, recs, reason="error")


def call_behind(directory):
    """Rank 1 is still in call 6 (phase 2) while the others wait for it in call 7's phase 1."""
    recs = calls(4, 7)
    recs[1] = recs[1][:6]
    recs[1][-1].update(exited=None, phase="phase 2", pending=[3])
    for r in (0, 2, 3):
        recs[r][-1].update(exited=None, phase="phase 1", phase1_end=None, first_message=None, pending=[1])
    return write(directory, recs, reason="timeout", written=recs[0][-1]["arrived"] + 5)


def skipped(directory):
    """Each call has its own count; rank 3 skipped call 5, so its 5 is the others' 6."""
    recs = calls(4, 9)
    for rec in (rec for rank_recs in recs.values() for rec in rank_recs):
        rec["count"] = 1000 * rec["seq"]
    recs[3] = [rec for rec in recs[3] if rec["seq"] != 5]
    for rec in recs[3]:
        rec["seq"] -= rec["seq"] > 5
    return write(directory, recs)


def missing_file(directory):
    """Rank 3 wrote nothing."""
    return write(directory, calls(4, 10), skip=(3,))


def bad_version(directory):
    """Rank 1's header says version 2."""
    return write(directory, calls(2, 3), headers={1: dict(header(1, 2, written=1.0), version=2)})


CASES = {f.__name__: f for f in (agree, never_arrived, other_count, call_behind, skipped,
                                  missing_file, bad_version)}
