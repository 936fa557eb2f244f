"""The flight recorder: every rank's last calls, kept where a hung or failed job can be read.

A ring of ``CAPACITY`` records (the newest overwrite the oldest), one per call of the
library's ``Allreduce`` on this rank, blocking and nonblocking: the communicator and its
call number (``seq``, from 1 on every rank alike), op, count, datatype, algorithm,
straggler, the times it arrived, ended phase 1, got the first message of its round
schedule and returned (MPI_Wtime), and how far it got.  The compiled entry
(cython_src/call/_entry.pyx) writes the records of the calls it runs in C (a native
call: no Python at all) straight into ``RING``'s memory; the Python path writes the
rest here (a repeated call's in call/record.py: no file more on its path).  Writers hold
the GIL, so a record is never half written when it is read.

``STRAGGLAR_TRACE=DIR`` writes this rank's records to ``DIR/rank-NNNNN.jsonl``
(``dump``: JSON Lines, format ``VERSION``; docs/OBSERVABILITY.md) at a timeout, a
failed call, the first stall warning (call/watchdog.py) and the exit; ``python -m
stragglar_mpi trace DIR`` reads them.  Without it a timeout prints the last few records
to stderr (``recent``).
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import weakref

import numpy as np
from mpi4py import MPI

from ..core import config as _config
from ..core.lifetime import PROCESS, TRACE
from ..schedule.algorithms import CHOICES, NATIVE

CAPACITY = 512
VERSION = 1
FORMAT = "stragglar_mpi trace"

#: One record; the compiled entry declares the same fields in the same order (packed).
RECORD = np.dtype([("serial", "i8"), ("seq", "i8"), ("count", "i8"),
                   ("arrived", "f8"), ("phase1_end", "f8"), ("first_message", "f8"),
                   ("exited", "f8"),
                   ("comm", "i4"), ("rank", "i4"), ("op", "i4"), ("dtype", "i4"),
                   ("algorithm", "i4"), ("straggler", "i4"), ("phase", "i4"), ("flags", "i4")])
RING = np.zeros(CAPACITY, RECORD)
#: Records opened so far (the next one's serial); the compiled entry reads and writes it.
OPENED = np.zeros(1, np.longlong)

# phase
ENTERED, DECIDING, RUNNING, PHASE1, PHASE2, DONE, FAILED = range(1, 8)
PHASES = ("", "entered", "deciding", "running", "phase 1", "phase 2", "done", "failed")
# flags
WARNED = 1          # a stall warning was given for it (call/watchdog.py)

ALGORITHMS = ("",) + tuple(CHOICES)          # code -> name ("": not decided yet)
_NAMES = {"": 0}                            # datatype and op names -> codes, grown as met
_TEXTS = [""]
_COMMS = [None]                             # comm code -> what a trace says of it (``attach``)
_DETAIL = {}                                # serial -> (error text, pending peers) of a failed call
_LOCK = threading.Lock()


def code(name: str) -> int:
    """The code of a datatype or op name (made at its first use: a binding's, once)."""
    with _LOCK:
        if name not in _NAMES:
            _NAMES[name] = len(_TEXTS)
            _TEXTS.append(name)
        return _NAMES[name]


def algorithm_code(name) -> int:
    return ALGORITHMS.index(name) if name in ALGORITHMS else 0


def codes(args):
    """(op, datatype, algorithm) codes of a call's checked arguments (bind/args.Args)."""
    _, _, _, _, _, type_name, op_name = args.signature
    return code(op_name.replace("MPI.", "")), code(_dtype_name(type_name)), algorithm_code(
        args.name if args.name == NATIVE else "")


def _dtype_name(type_code):
    try:
        return np.dtype(type_code).name
    except TypeError:
        return str(type_code)


# --- communicators --------------------------------------------------------------------

def attach(state, name):
    """Give a new communicator's state its code and call counter (``state.flight``:
    [code, calls so far, rank], read by the compiled entry too), once its setup is over."""
    private = state.private
    n, rank = private.Get_size(), private.Get_rank()
    world = MPI.Group.Translate_ranks(private.Get_group(), list(range(n)), MPI.COMM_WORLD.Get_group())
    tables = state.arrival_tables()
    info = {"ident": "%x-%x" % (state.key[1], state.key[2]), "name": name,
            "size": n, "rank": rank, "world_ranks": [int(r) for r in world],
            "offset": tables.offset if tables is not None else 0.0, "state": weakref.ref(state)}
    with _LOCK:
        _COMMS.append(info)
        cell_of(state, rank)[0] = len(_COMMS) - 1


def cell_of(state, rank):
    """``state.flight``, made at its first call (a nonblocking first call counts before
    its setup ends: its records then name no communicator)."""
    if getattr(state, "flight", None) is None:
        state.flight = np.array([0, 0, rank], np.longlong)
    return state.flight


def comm_info(comm_code):
    return _COMMS[comm_code] if 0 < comm_code < len(_COMMS) else None


# --- the Python path's records ---------------------------------------------------------

def open_call(t_arrived) -> int:
    """A record for a call that the Python path runs (a nonblocking one); its serial."""
    serial = int(OPENED[0])
    OPENED[0] = serial + 1
    rec = RING[serial % CAPACITY]
    rec.fill(0)
    rec["serial"], rec["arrived"], rec["phase"], rec["straggler"] = serial, t_arrived, ENTERED, -1
    return serial


def mine(serial):
    """The record of ``serial``, or None once newer calls overwrote it."""
    rec = RING[serial % CAPACITY]
    return rec if serial >= 0 and rec["serial"] == serial else None


def bound(serial, state, args, rank):
    """The call ``serial`` is the next of ``state``'s communicator (``args``: its checked
    arguments, None while not known: ``described``)."""
    cell = cell_of(state, rank)
    cell[1] += 1
    rec = mine(serial)
    if rec is not None:
        rec["comm"], rec["seq"], rec["rank"], rec["phase"] = cell[0], cell[1], cell[2], DECIDING
        described(serial, args)


def described(serial, args):
    rec = mine(serial)
    if rec is not None and args is not None:
        rec["count"] = args.out.count
        rec["op"], rec["dtype"], rec["algorithm"] = codes(args)


def failed(serial, error, pending=None, phase=None):
    """The call raised ``error`` (``pending``: the peers it still waited for, ``phase``:
    where); under STRAGGLAR_TRACE the record goes to the file at once."""
    rec = mine(serial)
    if rec is None:
        return
    rec["phase"], rec["exited"] = FAILED, 0.0
    _DETAIL[serial] = (str(error), list(pending) if pending else None, phase)
    if len(_DETAIL) > CAPACITY:
        _DETAIL.pop(min(_DETAIL))
    if not isinstance(error, (ValueError, TypeError)):     # a bad argument: nothing to trace
        dump("timeout" if "timed out" in str(error) else "error")


# --- reading ---------------------------------------------------------------------------

def records():
    """This rank's records, oldest first, as the trace writes them (dicts)."""
    with _LOCK:
        opened = int(OPENED[0])
        rows = [RING[s % CAPACITY].copy() for s in range(max(0, opened - CAPACITY), opened)]
    return [as_dict(r) for r in rows if r["phase"]]


def as_dict(rec) -> dict:
    info = comm_info(int(rec["comm"]))
    shift = -info["offset"] if info else 0.0
    detail = _DETAIL.get(int(rec["serial"]), (None, None, None))
    straggler = int(rec["straggler"])

    def t(name):
        return float(rec[name]) + shift if rec[name] else None
    return {"comm": info["ident"] if info else None, "seq": int(rec["seq"]) or None,
            "rank": int(rec["rank"]) if info else None, "op": _TEXTS[rec["op"]] or None,
            "count": int(rec["count"]), "dtype": _TEXTS[rec["dtype"]] or None,
            "bytes": int(rec["count"]) * _itemsize(_TEXTS[rec["dtype"]]),
            "algorithm": ALGORITHMS[rec["algorithm"]] or None,
            "straggler": straggler if straggler >= 0 else None,
            "arrived": t("arrived"), "phase1_end": t("phase1_end"),
            "first_message": t("first_message"), "exited": t("exited"),
            "phase": detail[2] or PHASES[rec["phase"]], "pending": detail[1], "error": detail[0]}


def _itemsize(name):
    try:
        return np.dtype(name).itemsize
    except TypeError:
        return 0


def open_calls():
    """(serial, record) of the calls not yet returned, oldest first."""
    with _LOCK:
        opened = int(OPENED[0])
        rows = [RING[s % CAPACITY] for s in range(max(0, opened - CAPACITY), opened)]
    return [(int(r["serial"]), r) for r in rows if r["phase"] and r["phase"] < DONE]


def recent(count=5) -> str:
    """The last ``count`` records as text lines (what a timeout prints without a trace)."""
    rows = records()[-count:]
    return "\n".join(f"  {_line(r)}" for r in rows)


def _line(r) -> str:
    took = (f"{(r['exited'] - r['arrived']) * 1e3:.3f} ms" if r["exited"]
            else "raised" if r["error"] else "not returned")
    if r["comm"] is None:
        return f"a first call on a communicator (its setup): {r['phase']}, {took}" + (
            f", pending {r['pending']}" if r["pending"] else "")
    return (f"call {r['seq']} on {r['comm']}: {r['op']} {r['count']} x {r['dtype']}, "
            f"{r['algorithm'] or 'undecided'}, straggler {r['straggler']}, {r['phase']}, {took}"
            + (f", pending {r['pending']}" if r["pending"] else ""))


# --- the trace file --------------------------------------------------------------------

def dump(reason) -> str | None:
    """Write this rank's records to STRAGGLAR_TRACE's folder (the whole file, replaced);
    its path, or None without the setting."""
    try:
        folder = _config.current().trace
    except ValueError:
        return None
    if not folder or MPI.Is_finalized():
        return None
    os.makedirs(folder, exist_ok=True)
    rank = MPI.COMM_WORLD.Get_rank()
    path = os.path.join(folder, f"rank-{rank:05d}.jsonl")
    lines = [json.dumps(_header(reason, rank))] + [json.dumps(r) for r in records()]
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(temporary, path)
    return path


def _header(reason, rank):
    comms = {c["ident"]: {k: c[k] for k in ("name", "size", "rank", "world_ranks", "offset")}
             for c in _COMMS[1:]}
    return {"format": FORMAT, "version": VERSION, "rank": rank, "size": MPI.COMM_WORLD.Get_size(),
            "host": socket.gethostname(), "pid": os.getpid(), "reason": reason,
            "written": MPI.Wtime(), "comms": comms}


def _at_exit():
    try:
        dump("exit")
    except OSError as exc:
        sys.stderr.write(f"stragglar_mpi: the trace could not be written: {exc}\n")


PROCESS.on_exit(TRACE, _at_exit)
