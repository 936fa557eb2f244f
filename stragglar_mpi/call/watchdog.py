"""The stall watchdog: a thread per process that says who a waiting call waits for.

Every ``TICK`` it reads the flight recorder (call/flight.py) for calls of this rank that
have not returned.  One that has waited STRAGGLAR_STALL_WARN seconds gets one warning
on stderr, one write, naming the call and the ranks not in it yet, whatever runs it (the
compiled entry's native call included: the entry records it too).  The job keeps running.

Which ranks are not in the call: the watchdog asks every other member of the
communicator, on the arrival tables' duplicate (core/tags.py ``WATCH_QUERY``), and their
watchdogs answer with the number of their last call there and whether it has returned.
A rank whose last call is older is missing; one that does not answer within
``ANSWER_WAIT`` is named as silent (busy outside MPI, holding the GIL, or gone).  The
same question names the missing ranks of a native call that times out (``missing``).

Asking and answering are MPI calls from this thread, so the watchdog needs
MPI_THREAD_MULTIPLE (mpi4py's default); below it the warnings still come, without names.
"""
from __future__ import annotations

import queue
import sys
import threading

import numpy as np
from mpi4py import MPI

from ..core import config as _config
from ..core import tags
from ..core.lifetime import PROCESS, WATCHDOG
from ..schedule.units import format_size
from . import flight

TICK = 0.1            # seconds between the watchdog's looks
ANSWER_WAIT = 1.0     # seconds a question waits for the other ranks' answers


class Question:
    """Which call the other members of a communicator are in, asked for call ``seq``."""

    def __init__(self, info, tables, seq, then):
        self.info, self.tables, self.seq, self.then = info, tables, seq, then
        self.size, me = info["size"], info["rank"]
        self.waiting = {r for r in range(self.size) if r != me}
        self.answers = {}            # rank -> (last call, returned)
        self.until = MPI.Wtime() + ANSWER_WAIT
        self.sent = [tables.comm.Isend(np.array([seq, 0, 0], np.int64), r, tags.WATCH_QUERY)
                     for r in sorted(self.waiting)]

    def over(self):
        return not self.waiting or MPI.Wtime() > self.until

    def verdict(self):
        """(missing: {rank: its last call}, silent ranks, ranks ahead of this call)."""
        missing = {r: last for r, (last, _) in self.answers.items() if last < self.seq}
        ahead = sorted(r for r, (last, _) in self.answers.items() if last > self.seq)
        return missing, sorted(self.waiting), ahead


class Watchdog:
    def __init__(self):
        self.thread = None
        self.stop = threading.Event()
        self.asks = queue.SimpleQueue()     # (state, seq, then) from other threads
        self.questions = []
        self.replies = []                   # answers and questions in flight
        self.dumped = False

    def start(self):
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True, name="stragglar_mpi watchdog")
            self.thread.start()

    def _run(self):
        talks = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        while not self.stop.wait(TICK) and not MPI.Is_finalized():   # the caller may finalize
            try:
                self._look(talks)
            except Exception as exc:      # the watchdog must never take the job down
                if not MPI.Is_finalized():
                    _say(f"stragglar_mpi: the stall watchdog stopped: {exc!r}")
                return

    def _look(self, talks):
        if talks:
            self._answer()
            self._ask()
        self._stalls(talks)

    # --- answering and asking ---------------------------------------------------------

    def _answer(self):
        """Answer every question waiting on a watched communicator; take in answers."""
        self.replies = [r for r in self.replies if not r.Test()]
        for state in PROCESS.live("arrivals"):
            tables, cell = state.arrival_tables(), getattr(state, "flight", None)
            if tables is None or cell is None:
                continue
            with tables.lock:
                if tables.comm != MPI.COMM_NULL:
                    self._serve(tables.comm, cell)

    def _serve(self, comm, cell):
        status, got = MPI.Status(), np.zeros(3, np.int64)
        while comm.Iprobe(MPI.ANY_SOURCE, tags.WATCH_QUERY, status):
            comm.Recv(got, status.Get_source(), tags.WATCH_QUERY)
            last = int(cell[1])
            reply = np.array([got[0], last, _returned(int(cell[0]), last)], np.int64)
            self.replies.append(comm.Isend(reply, status.Get_source(), tags.WATCH_ANSWER))
        while comm.Iprobe(MPI.ANY_SOURCE, tags.WATCH_ANSWER, status):
            comm.Recv(got, status.Get_source(), tags.WATCH_ANSWER)
            for q in self.questions:
                if q.tables.comm == comm and q.seq == got[0] and status.Get_source() in q.waiting:
                    q.waiting.discard(status.Get_source())
                    q.answers[status.Get_source()] = (int(got[1]), bool(got[2]))

    def _ask(self):
        while True:
            try:
                state, seq, then = self.asks.get_nowait()
            except queue.Empty:
                break
            info, tables = flight.comm_info(int(state.flight[0])), state.arrival_tables()
            if tables is None:
                then(None)
                continue
            with tables.lock:
                self.questions.append(Question(info, tables, seq, then))
        for q in [q for q in self.questions if q.over()]:
            self.questions.remove(q)
            self.replies += q.sent          # completed later by ``_answer``'s tests
            q.then(q.verdict())

    def ask(self, state, seq, then):
        """Ask the other members of ``state``'s communicator about call ``seq``;
        ``then(verdict or None)`` runs on the watchdog's thread."""
        self.asks.put((state, seq, then))

    # --- stalls -------------------------------------------------------------------------

    def _stalls(self, talks):
        try:
            limit = _config.current().stall_warn
        except ValueError:
            return
        if not limit:
            return
        now = MPI.Wtime()
        for serial, rec in flight.open_calls():
            if rec["flags"] & flight.WARNED or now - rec["arrived"] < limit:
                continue
            rec["flags"] |= flight.WARNED
            self._warn(serial, flight.as_dict(rec), now - rec["arrived"], talks)

    def _warn(self, serial, call, waited, talks):
        info = flight.comm_info(flight.RING[serial % flight.CAPACITY]["comm"])
        state = info["state"]() if info else None
        if state is None or not talks or state.arrival_tables() is None:
            why = ("its communicator's setup (its first call) has not ended" if info is None
                   else "the MPI thread level is below MPI_THREAD_MULTIPLE")
            self._stalled(call, waited, f"which ranks are not in it is not known: {why}", info)
            return
        self.ask(state, call["seq"], lambda verdict: self._stalled(call, waited, _who(verdict), info))

    def _stalled(self, call, waited, who, info):
        where = f"call {call['seq']} on {info['name']}" if info else "a first call on a communicator"
        what = (f"{format_size(call['bytes'])} {call['dtype']} {call['op']}, "
                f"{call['algorithm'] or 'algorithm not decided yet'}"
                + (f", straggler {call['straggler']}" if call["straggler"] is not None else ""))
        _say(f"stragglar_mpi: rank {MPI.COMM_WORLD.Get_rank()} has waited {waited:.1f} s in {where} "
             f"({what}): {who}. It keeps waiting (STRAGGLAR_TIMEOUT makes such a call raise; "
             "STRAGGLAR_STALL_WARN sets when this warning comes).")
        if not self.dumped:
            self.dumped = flight.dump("stall") is not None

    def end(self):
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5 * TICK + ANSWER_WAIT)


def _who(verdict):
    if verdict is None:
        return "which ranks are not in it is not known (the communicator is being freed)"
    missing, silent, ahead = verdict
    parts = []
    if missing:
        parts.append("not in it yet: " + ", ".join(
            f"rank {r} (its last call there: {last})" for r, last in sorted(missing.items())))
    if silent:
        parts.append(f"no answer from rank(s) {', '.join(map(str, silent))} (busy outside MPI, or gone)")
    if ahead:
        parts.append(f"rank(s) {', '.join(map(str, ahead))} are past this call: this rank is behind")
    return "; ".join(parts) or "every rank is in it (a message of the call is late)"


def _returned(comm_code, last):
    """1 when this rank's call ``last`` on that communicator has returned."""
    return int(not any(rec["comm"] == comm_code and rec["seq"] == last for _, rec in flight.open_calls()))


def _say(line):
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


WATCHDOG_THREAD = Watchdog()


def missing(state, seq, bound=2 * ANSWER_WAIT):
    """For a timed-out call: the verdict on call ``seq`` of
    ``state``'s communicator (see ``Question.verdict``), or None when it cannot be had."""
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE or WATCHDOG_THREAD.thread is None:
        return None
    done, box = threading.Event(), []
    WATCHDOG_THREAD.ask(state, seq, lambda verdict: (box.append(verdict), done.set()))
    return box[0] if done.wait(bound + 2 * TICK) else None


PROCESS.on_exit(WATCHDOG, WATCHDOG_THREAD.end)
