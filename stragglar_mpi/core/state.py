"""What the library keeps per communicator, attached to it as an MPI attribute.

Our messages travel on a private duplicate, so a user's point-to-point traffic on
the same communicator is never matched by ours.  Sub-communicators of the early
ranks are made with ``Create_group``, which only the early ranks call: the
straggler is never waited for while they are built.

Every collective step here runs under the call's deadline (an MPI_Wtime, 0 = none).
MPI has no nonblocking form of ``Create_group`` (nor of the blocking steps of the
setup), so each blocking step comes after a nonblocking one that proves every member
is there:
- the setup (first call): with a deadline, a presence message from every member
  (zero bytes, on the caller's communicator, ``tags.setup()``) names the ranks that
  did not come; then ``Idup`` waited with the deadline; once it completes every
  member is in the setup, so the key broadcast and what the higher rooms make here
  (``collective``: the arrival table, the topology) follow at once, in this thread;
- a sub-communicator (first call with a straggler value): every early rank sends
  its straggler value to the other early ranks and waits for theirs with the
  deadline; ``Create_group`` follows when all have come and agree, in a helper
  thread waited with the deadline.  One that gave up waiting still enters it, from
  a background thread, once the values come (_agree_on_straggler): so no thread is
  left blocked in ``Create_group`` when every early rank came, late or not.
"""
from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict, deque

import numpy as np
from mpi4py import MPI

from . import tags
from .errors import Mismatch, Pending
from .exchange import Exchange, absent, cancel, wait
from .lifetime import ARRIVALS, PROCESS

#: Sub-communicators of early ranks kept per user communicator (MPICH has ~2048 context ids).
EARLY_COMMS = 8
_SETUP = "the setup of this communicator (its first call)"


class State:
    """One communicator's library state.  ``bindings``: the compiled entry's cache of
    earlier calls' checks (call/_entry.pyx), or None without the build."""

    def __init__(self, bindings=None):
        self.private = None
        self.key = None
        self.early_comms = OrderedDict()  # straggler -> its early ranks' comm (None on it), LRU
        self.calls = Counter()
        self.last = None                  # the last call: a call.record.CallRecord
        self.history = deque(maxlen=64)   # arrival records of earlier tracked calls
        self.auto_calls = 0               # "auto" calls above the small-size cut
        self.next_pair, self.pair_gap = 1, 1  # when "auto" records arrivals next (_allreduce._sampled)
        self.tracked_seq = None           # arrival-table number of the last tracked call
        self.broken = None                # why this state is unusable (after a timeout)
        self.bindings = bindings
        self.log = None                   # what tracked calls ran, for the report (call/report.Log)
        self._arrivals = None             # the arrival table (decide/arrival.Arrivals), set at setup
        self.topology, self.node_comm, self.links = None, None, None
        self.node_early = {}              # straggler -> its node without it (hierarchical)
        self._scratch = np.empty(0, dtype=np.uint8)
        self.pools = {}                   # memory backends' scratch, per operation (_memory.Pool)

    def setup(self, comm, deadline=0.0, collective=None):
        """The collective part, in the first call on ``comm`` (see the module's docstring);
        ``collective(state)`` then makes what the higher rooms keep here (the arrival
        table, the topology: decide/roles.setup)."""
        if deadline and comm.Get_size() > 1:
            _presence(comm, deadline)
        private, request = MPI.Intracomm.Idup(comm)
        if not wait([request], deadline):
            cancel([], private, request)   # MPI completes the Idup into them later: keep them
            others = [r for r in range(comm.Get_size()) if r != comm.Get_rank()]
            raise Pending(others, _SETUP + ": the other ranks did not join its duplicate "
                          "(they may have given up waiting for this rank)")
        self.private = MPI.Intracomm(private)
        # Every member has joined the Idup: what follows cannot wait for long.  The same
        # key on every member: arrival tables are freed at exit in key order, so ranks
        # that share several communicators never wait on each other crosswise.
        self.key = self.private.bcast((MPI.Wtime(), os.getpid(), id(self)), root=0)
        if collective is not None and self.private.Get_size() > 1:
            collective(self)

    def tiers(self):
        """(topology, links) when the communicator spans nodes, else None (one tier)."""
        return None if self.links is None else (self.topology, self.links)

    def node_early_comm(self, straggler):
        """The straggler's node without it (call on that node's early ranks)."""
        sub = self.node_early.get(straggler)
        if sub is None:
            group = self.node_comm.Get_group()
            local = self.topology.local(straggler)
            early = group.Excl([local])
            sub = self.node_comm.Create_group(early, tags.NODE_SUBCOMM)
            early.Free()
            group.Free()
            self.node_early[straggler] = sub
        return sub

    def arrivals(self):
        """The shared arrival table (made collectively with the state, in the first call)."""
        return self._arrivals

    def keep_arrivals(self, table):
        """Keep the arrival table made at setup; it is freed with the state or at exit."""
        self._arrivals = table
        PROCESS.register("arrivals", self)

    def absent_ranks(self):
        """Ranks missing from the arrival table of the current call, when it is tracked."""
        if self._arrivals is None or self.tracked_seq is None:
            return []
        try:
            return self._arrivals.absent(self.tracked_seq)
        except MPI.Exception:
            return []

    def free_arrivals(self):
        if self._arrivals is not None and not MPI.Is_finalized():
            self._arrivals.free()
        self._arrivals = None

    def early_comm(self, straggler, deadline=0.0):
        """Intracomm of every rank but ``straggler``, in rank order; None on the straggler.

        Call it on every rank, the straggler too, with the same straggler: the LRU
        order is then the same on every rank, so an evicted sub-communicator is freed
        at the same call on all its members (freeing is collective among them).  A
        miss costs one Create_group among the early ranks (and one Free if full).
        """
        comms = self.early_comms
        if straggler in comms:
            comms.move_to_end(straggler)
            return comms[straggler]
        if len(comms) >= EARLY_COMMS:
            _, old = comms.popitem(last=False)
            if old is not None:
                old.Free()
        sub = None
        if self.private.Get_rank() != straggler:
            group = self.private.Get_group()
            early = group.Excl([straggler])
            group.Free()
            private = self.private      # a thread may call make() after this state is freed
            make = (lambda: private.Create_group(early, tags.SUBCOMM))
            _agree_on_straggler(private, straggler, deadline, make)
            sub = _bounded(make, deadline, f"the sub-communicator of the early ranks (straggler={straggler})",
                           private)
            early.Free()                # (kept by a thread that has not finished with it)
        comms[straggler] = sub
        return sub

    def scratch(self, nbytes):
        if self._scratch.nbytes < nbytes:
            self._scratch = np.empty(nbytes, dtype=np.uint8)
        return self._scratch

    def free(self):
        if MPI.Is_finalized():
            return
        self.free_arrivals()
        for sub in list(self.early_comms.values()) + list(self.node_early.values()):
            if sub is not None:
                sub.Free()
        self.early_comms.clear()
        self.node_early.clear()
        if self.node_comm is not None:
            self.node_comm.Free()
        if self.private is not None and not PROCESS.in_use(self.private):
            self.private.Free()


def _presence(comm, deadline):
    """Wait until every member of ``comm`` has entered the setup; Pending names those
    that have not by ``deadline``."""
    missing = absent(comm, deadline, tags.setup())
    if missing:
        raise Pending(missing, _SETUP, missing=missing)


def _agree_on_straggler(private, straggler, deadline, make):
    """Before ``Create_group`` (which blocks): every early rank has come with the same
    straggler value.  Pending names the early ranks not heard from by ``deadline``;
    another value raises Mismatch naming the ranks that passed it.

    The rule that keeps ``Create_group`` from blocking for good: an early rank enters
    it exactly when it has every other early rank's value and they all agree, on time
    or not.  Values are never withdrawn (the sends are left to complete), so if one
    rank has them all, every early rank came and each one gets them all too; one that
    gave up gets them in a background thread that then enters ``Create_group`` (and
    frees what it made), and the ranks already inside are released."""
    rank, n = private.Get_rank(), private.Get_size()
    peers = [r for r in range(n) if r not in (rank, straggler)]
    mine = np.array([straggler], np.int64)
    theirs = np.full((len(peers), 1), -1, np.int64)
    values = Exchange(private, peers, tags.setup(), mine, list(theirs))
    silent = values.silent(deadline, sends_too=False)
    _mismatch(rank, straggler, [(r, int(v)) for r, v in zip(peers, theirs[:, 0])
                                if r not in silent and v != straggler])
    if silent:
        _Finisher(values.recvs + values.sends, (mine, theirs), straggler, make, private).start()
        raise Pending(silent, f"the sub-communicator of the early ranks (first call with straggler={straggler})")
    PROCESS.linger(values.sends, mine)      # eager: complete, or soon


def _mismatch(rank, straggler, other):
    if other:
        raise Mismatch(f"stragglar_mpi: straggler= differs across ranks: rank {rank} passed "
                       f"{straggler}, " + ", ".join(f"rank {r} passed {v}" for r, v in other))


class _Finisher(threading.Thread):
    """After a timed-out agreement: take in the values still to come, then enter
    ``Create_group`` as the other early ranks may have (see _agree_on_straggler).
    Polls with a sleep, never spins; stops, cancelling its receives, at exit."""

    def __init__(self, reqs, buffers, straggler, make, comm):
        super().__init__(daemon=True, name="stragglar_mpi sub-communicator")
        self.reqs, self.buffers, self.straggler, self.make = reqs, buffers, straggler, make
        PROCESS.track(self, comm)

    def run(self):
        while not MPI.Request.Testall(self.reqs):
            if PROCESS.stop.wait(0.002):
                cancel(self.reqs, *self.buffers)
                return
        if np.all(self.buffers[1] == self.straggler):
            self.make().Free()


def _bounded(make, deadline, phase, comm):
    """``make()``, a blocking collective, given up at ``deadline``: it runs in a thread
    that stays blocked (with the state unusable) if the other members gave up after
    they proved present.  Without a deadline or MPI_THREAD_MULTIPLE, called directly."""
    if not deadline or MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        return make()
    result, lock = [], threading.Lock()

    def run():
        try:
            outcome = (True, make())
        except BaseException as exc:    # handed to the caller's thread
            outcome = (False, exc)
        with lock:
            result.append(outcome)
            late = len(result) > 1      # the caller gave up first: nobody will use it
        if late and outcome[0]:
            outcome[1].Free()

    worker = threading.Thread(target=run, daemon=True, name="stragglar_mpi blocking setup")
    PROCESS.track(worker, comm)
    worker.start()
    while worker.is_alive() and MPI.Wtime() < deadline:
        worker.join(0.001)
    with lock:
        if not result:
            result.append(None)
            raise Pending((), phase + ": the other members did not complete it (they may have "
                          "given up waiting for this rank)")
    ok, value = result[0]
    if not ok:
        raise value
    return value


def _free_arrival_tables():
    # Before MPI_Finalize (core/lifetime.py says when): in key order on every rank.
    for state in sorted(PROCESS.live("arrivals"), key=lambda st: st.key):
        state.free_arrivals()


PROCESS.on_exit(ARRIVALS, _free_arrival_tables)


def _delete(comm, keyval, state):
    state.free()


KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete)


def setup_state(comm, deadline=0.0, bindings=None, collective=None) -> State:
    """The state of ``comm``, set up collectively in its first call (under ``deadline``);
    ``bindings`` and ``collective`` are what the call room gives a new one (State.setup).

    A setup that fails leaves a state behind that says why (``broken``), so that a
    later call raises instead of starting a second, mismatched setup."""
    state = comm.Get_attr(KEYVAL)
    if state is None:
        state = State(bindings() if bindings else None)
        comm.Set_attr(KEYVAL, state)
        try:
            state.setup(comm, deadline, collective)
        except BaseException as exc:
            state.broken = state.broken or f"its setup failed ({type(exc).__name__}: {exc})"
            raise
    elif state.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {state.broken}")
    return state


def peek(comm):
    """The state if the communicator has one, without creating it."""
    return comm.Get_attr(KEYVAL)
