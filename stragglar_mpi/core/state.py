"""What the library keeps per communicator, attached to it as an MPI attribute.

Our messages travel on a private duplicate, so a user's point-to-point traffic on
the same communicator is never matched by ours.  Phase 1 and phase 2 are plans run on
that duplicate (run/phases.py), so the library makes no sub-communicator of the early
ranks, nor of a node.  A user communicator costs two MPI communicators, whatever
its calls: the private duplicate and the arrival tables' duplicate (the node
communicator that finds the layout at setup is freed at once).

Calls run in *sequences*: the blocking calls (the ``State`` itself) and up to
``LANES`` lanes of nonblocking ones (``Lane``).  The calls of one sequence never
overlap on a rank; those of different sequences may, so each sequence has its own
tags (core/tags.py), its own host scratch and its own decisions in call order (its
arrival table, the history, auto's sampling), which every rank reads alike.  MPI
collectives on the private duplicate (a native AllReduce) are issued in call order
across all sequences: ``Turns``.

Every collective step here runs under the call's deadline (an MPI_Wtime, 0 = none):
the setup (first call) with a deadline first waits for a presence message from every
member (zero bytes, on the caller's communicator, ``tags.setup()``), which names the
ranks that did not come; then ``Idup`` waited with the deadline; once it completes
every member is in the setup, so the key broadcast and what the higher rooms make here
(``collective``: the arrival tables, the topology) follow at once.  A nonblocking
first call posts the presence messages and the ``Idup`` at the call (in call order),
and a thread of its own finishes the setup (``begin_setup``).

Freeing a communicator with operations pending (MPI: they complete normally): each
nonblocking operation holds its state from its call (``hold``, the caller's thread) to
its end (``unhold``, the progress thread), and so does a setup's thread.  The user's
``Free`` (the attribute's delete callback, ``free``) with holds outstanding only marks
the state; the last ``unhold`` frees the library's communicators and arrival tables
then.  States are freed in the order the user freed them (the same on every rank), never
by a thread other than the one whose operation ended, never after the exit has freed
the arrival tables (MPI_Finalize follows): see ``_Freeing``.
"""
from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections import Counter, deque

import numpy as np
from mpi4py import MPI

from . import config as _config
from . import tags
from .errors import Abandoned, Pending, abandoned_message
from .exchange import Exchange, absent, cancel, wait
from .lifetime import ARRIVALS, PROCESS
from .steps import pause

_SETUP = "the setup of this communicator (its first call)"
LANES = tags.SEQUENCES - 1     # nonblocking operations that may run at once on a communicator
#: Seconds past the others' deadline (their entry + the timeout) before a rank coming to
#: a call takes it that they gave it up (the clocks' offsets are known to a few ms).
GIVEN_UP_MARGIN = 0.25


class Sequence:
    """Calls that never overlap on a rank, and what decides their roles, in call order."""

    def __init__(self, owner, index):
        self.owner, self.index = owner, index
        self.tag0 = tags.rounds(index)
        self.history = deque(maxlen=64)   # arrival records of earlier tracked calls
        self.auto_calls = 0               # "auto" calls above the small-size cut
        self.next_pair, self.pair_gap = 1, 1  # when "auto" records arrivals next (decide/roles.sampled)
        self.tuning = None                # auto's measured choices (decide/tuning.Tuner; blocking calls)
        self.tracked_seq = None           # arrival-table number of the last tracked call
        self.log = None                   # what tracked calls ran, for the report (blocking calls)
        self._table = None                # this sequence's arrival table, made at its first use
        self._entered = (None, {})        # (tracked call, {rank: entry}) for check_given_up
        self._scratch = np.empty(0, dtype=np.uint8)

    # What the communicator's setup made (the same for every sequence).
    @property
    def private(self):
        return self.owner._private

    @property
    def topology(self):
        return self.owner._topology

    @property
    def links(self):
        return self.owner._links

    @property
    def pools(self):
        return self.owner._pools

    @property
    def broken(self):
        """Why the communicator's library state is unusable (a timeout, a mismatch), or None."""
        return self.owner._broken

    @broken.setter
    def broken(self, why):
        self.owner._broken = why

    def abandon(self, why):
        """A call of this sequence died mid-way: the communicator is unusable and its
        library communicators are never freed (State.free)."""
        self.owner._broken = self.owner._broken or why
        self.owner._abandoned = True
        if self.owner.bindings is not None:
            self.owner.bindings.clear()   # a broken state is never reached from the compiled entry

    def tiers(self):
        """(topology, links) when the communicator spans nodes, else None (one tier)."""
        return None if self.links is None else (self.topology, self.links)

    def arrivals(self):
        """This sequence's arrival table (decide/arrival.py, decide/notices.py)."""
        if self._table is None and self.owner._arrivals is not None:
            self._table = self.owner._arrivals.table(self.index)
        return self._table

    def absent_ranks_steps(self):
        """Generator, once a wait of the current call (tracked) has timed out: the ranks
        missing from its arrival table (each waiting rank takes part in a short
        exchange).  When none is missing, this rank may be the late one that came after
        the others gave the call up: ``Abandoned`` is raised here (``check_given_up``)."""
        table = self.arrivals()
        if table is None or self.tracked_seq is None:
            return []
        try:
            missing = yield from table.absent(self.tracked_seq)
        except MPI.Exception:
            return []
        if not missing:      # every rank came: this one may be the late one
            self.check_given_up(before=False)
        return missing

    def note_entries(self):
        """Keep when each rank entered the current tracked call, as far as this rank has
        heard (rank 0's clock), for ``check_given_up``."""
        table = self.arrivals()
        try:
            entered = table.entered() if table is not None else {}
        except MPI.Exception:
            entered = {}
        self._entered = (self.tracked_seq, entered)

    def check_given_up(self, before):
        """Raise ``Abandoned`` if the other ranks have given up the current tracked call:
        a rank that entered it longer ago than the call's timeout (STRAGGLAR_TIMEOUT, the
        same on every rank) has timed out waiting for this one, since no rank completes a
        call without every rank.  Decided from the arrival notices this rank holds, with
        no message to the ranks that gave up (one to a dead rank crashed MPICH's UCX
        device).  ``before``: nothing of the call has run yet (a margin covers the
        clocks' offsets); after a failure, a rank near its deadline counts too.  The
        communicator is then unusable, as after any timeout."""
        timeout = _config.current().timeout
        table, (seq, entered) = self.arrivals(), self._entered
        if not timeout or table is None or seq is None or seq != self.tracked_seq:
            return
        margin = GIVEN_UP_MARGIN if before else -GIVEN_UP_MARGIN
        now = table.now()
        ranks = sorted(r for r, t in entered.items() if now - t > timeout + margin)
        if ranks:
            message = abandoned_message(ranks, before)
            self.abandon(message)
            PROCESS.keep(self.scratch(0))
            raise Abandoned(message, ranks, phase="the call's start" if before else None)

    def scratch(self, nbytes):
        """This sequence's host scratch (its calls never overlap)."""
        if self._scratch.nbytes < nbytes:
            self._scratch = np.empty(nbytes, dtype=np.uint8)
        return self._scratch


class Lane(Sequence):
    """A lane of a communicator's nonblocking operations (index 1..LANES)."""


class Turns:
    """Collectives on the private duplicate in call order, across sequences.

    Every nonblocking operation takes a ticket at its call (``take``: the same count on
    every rank) and gives it back (``release``) once it has issued its collective, or
    once it knows it has none; an operation may issue its collective when every
    earlier ticket is back (``mine``).  A blocking call, which comes after all of
    them, waits for ``idle``."""

    def __init__(self):
        self.issued, self.next, self._back = 0, 0, set()
        self._lock = threading.Lock()

    def take(self):
        with self._lock:
            self.issued += 1
            return self.issued - 1

    def release(self, ticket):
        with self._lock:
            self._back.add(ticket)
            while self.next in self._back:
                self._back.discard(self.next)
                self.next += 1

    def mine(self, ticket):
        return self.next == ticket

    @property
    def idle(self):
        return self.next == self.issued


class Turn:
    """One call's place among the collectives on the private duplicate: a nonblocking
    operation's ticket, or (``ticket`` None) a blocking call, whose turn comes once no
    earlier operation holds one."""
    POLL = 1e-4     # seconds between looks while an earlier operation holds the turn

    def __init__(self, turns, ticket=None):
        self.turns, self.ticket, self.back = turns, ticket, ticket is None

    @property
    def blocking(self):
        return self.ticket is None

    def ready(self):
        return self.turns.idle if self.ticket is None else self.turns.mine(self.ticket)

    def wait(self, deadline=0.0):
        """Generator: until this call may issue its collective."""
        while not self.ready():
            now = MPI.Wtime()
            if deadline and now > deadline:
                raise Pending((), "its turn after the earlier nonblocking operations")
            yield from pause(now + self.POLL)

    def release(self):
        """This call has issued its collective, or has none (once; later calls are no-ops)."""
        if not self.back:
            self.back = True
            self.turns.release(self.ticket)


class State(Sequence):
    """One communicator's library state, and the sequence of its blocking calls.
    ``bindings``: the compiled entry's cache of earlier calls' checks
    (cython_src/_entry.pyx), or None without the build."""

    def __init__(self, bindings=None):
        super().__init__(self, 0)
        self._private = None
        self.key = None
        self.calls = Counter()
        self.last = None                  # the last call: a call.record.CallRecord
        self._broken = None
        self._abandoned = False           # a call died mid-way: keep the MPI objects (free)
        self.bindings = bindings
        self._arrivals = None             # what the arrival tables share (decide/roles.setup)
        self._topology, self._links = None, None
        self._pools = {}                  # memory backends' scratch, per operation (memory/host.Pool)
        self.lanes = []                   # the nonblocking lanes made so far
        self.started = 0                  # nonblocking operations started (Iallreduce, Allreduce_init)
        self.turns = Turns()
        self.lock = threading.Lock()      # the counters: blocking calls and the progress thread
        self.ready = threading.Event()    # set once the setup is over (well or not)
        self._joining = None              # the setup's (presence exchange, duplicate, Idup request)
        self._members = None              # (rank, size) in the caller's communicator, from join
        self.setup_error = None           # what a setup in a thread of its own raised
        self._holds = 0                   # operations (and a setup thread) not yet ended: hold()
        self.to_free = False              # the user freed the communicator (free)
        self.freed = False                # the library's communicators are freed (or kept for good)

    # --- setup ------------------------------------------------------------------------

    def setup(self, comm, deadline=0.0, collective=None):
        """The collective part, in the first call on ``comm`` (see the module's docstring);
        ``collective(state)`` then makes what the higher rooms keep here (the arrival
        tables, the topology: decide/roles.setup)."""
        self.join(comm, deadline)
        self.finish(comm, deadline, collective)

    def join(self, comm, deadline):
        """Post what the setup needs every member for (the presence messages under a
        deadline, the Idup): in call order, at the call; ``finish`` waits for it."""
        presence = None
        # The caller's communicator may be freed while the setup's thread runs (its
        # handle then reads MPI_COMM_NULL): only what is posted here uses it.
        self._members = (comm.Get_rank(), comm.Get_size())
        if deadline and comm.Get_size() > 1:
            others = [r for r in range(comm.Get_size()) if r != comm.Get_rank()]
            presence = Exchange(comm, others, tags.setup(), [bytearray(0), MPI.BYTE],
                                [[bytearray(0), MPI.BYTE] for _ in others])
        private, request = MPI.Intracomm.Idup(comm)
        self._joining = (presence, private, request)

    def finish(self, comm, deadline, collective):
        """Wait for every member (``join``), then the key and ``collective``."""
        if self._joining is not None:
            self._private = self._joined(self._members, deadline, *self._joining)
            self._joining = None
            if deadline and self._members[1] > 1:
                # A rank that comes after the others gave up completes their Idup (it was
                # posted with the presence messages): it must not block in what follows.
                missing = absent(self._private, deadline, tags.setup())
                if missing:
                    raise Pending(missing, _SETUP + ": the other ranks may have given up "
                                  "waiting for this rank")
        # Every member has joined the Idup: what follows cannot wait for long.  The same
        # key on every member: arrival tables are freed at exit in key order, so ranks
        # that share several communicators never wait on each other crosswise.
        self.key = self._private.bcast((MPI.Wtime(), os.getpid(), id(self)), root=0)
        if collective is not None and self._private.Get_size() > 1:
            collective(self)

    @staticmethod
    def _joined(members, deadline, presence, private, request):
        missing = presence.silent(deadline) if presence is not None else []
        if missing:
            presence.cancel()
            cancel([], private, request)   # MPI completes the Idup into them later: keep them
            raise Pending(missing, _SETUP, missing=missing)
        if not wait([request], deadline):
            cancel([], private, request)
            rank, size = members
            others = [r for r in range(size) if r != rank]
            raise Pending(others, _SETUP + ": the other ranks did not join its duplicate "
                          "(they may have given up waiting for this rank)")
        return MPI.Intracomm(private)

    # --- what the setup made ------------------------------------------------------------

    def keep_arrivals(self, base):
        """Keep what the arrival tables share (made at setup); freed with the state or at exit."""
        self._arrivals = base
        PROCESS.register("arrivals", self)

    def arrival_tables(self):
        """What the sequences' arrival tables share (decide/roles.Tables), or None."""
        return self._arrivals

    def set_layout(self, topology, links):
        self._topology, self._links = topology, links

    def lane(self, k):
        """Lane ``k`` (1..LANES), made at its first operation (nothing collective)."""
        while len(self.lanes) < k:
            self.lanes.append(Lane(self, len(self.lanes) + 1))
        return self.lanes[k - 1]

    def next_lane(self):
        """The lane of the next nonblocking operation: the k-th takes lane 1 + k % LANES
        (the same on every rank: every rank counts the same calls)."""
        self.started += 1
        return self.lane(1 + (self.started - 1) % LANES)

    def sequences(self):
        return [self] + self.lanes

    # --- freeing -----------------------------------------------------------------------

    def hold(self):
        """A nonblocking operation of this state has been called (the caller's thread, at
        the call): what it needs stays until its ``unhold``."""
        with _FREEING.lock:
            if self.freed:
                raise RuntimeError("stragglar_mpi: an operation on a communicator that was freed "
                                   "(its library state is gone)")
            self._holds += 1

    def unhold(self):
        """An operation that ``hold`` counted has ended (the progress thread); the last one
        of a communicator the user freed frees the library's communicators now."""
        with _FREEING.lock:
            self._holds -= 1
            if self._holds == 0:
                _FREEING.release()

    @property
    def holds(self):
        return self._holds

    def free(self):
        """The user freed the communicator (the attribute's delete callback): free the
        library's communicators and arrival tables once no operation holds them."""
        # MPI calls this inside MPI_Comm_free, or inside its progress once the caller's
        # own pending operations on the communicator end (on any thread, MPI's locks
        # held): so no MPI call and no lock here, only a note that a later point of ours
        # acts on (_Freeing.release: the next call, an operation's end, the exit).
        if not MPI.Is_finalized():
            _FREEING.note(self)

    def free_arrivals(self):
        if self._arrivals is not None and not MPI.Is_finalized():
            if self._abandoned:           # see _release
                PROCESS.keep(self._arrivals)
            else:
                self._arrivals.free()
        self._arrivals = None
        for seq in self.sequences():
            seq._table = None

    def _release(self):
        # Under _FREEING.lock, no operation holding the state (free, unhold).
        self.freed = True
        if MPI.Is_finalized():
            return
        self.free_arrivals()
        if self._private is None:
            return
        if self._abandoned:
            # A call died in the middle (an error that is not a timeout): ranks may have
            # posted different things on the library's communicators, so they are kept,
            # not freed (freeing them so left a later MPI_Comm_split_type hanging on Open MPI).
            PROCESS.keep(self._private)
        else:
            self._private.Free()


class _Freeing:
    """The states the user freed, in the order freed (the same on every rank: Free is a
    collective), each released once no operation holds it, and none before an earlier
    one: every rank frees the library's communicators in one order.  ``closed`` at exit,
    when the arrival tables are freed (MPI_Finalize follows): nothing is freed after."""

    def __init__(self):
        self.lock = threading.RLock()
        self.queue = deque()
        self.noted = deque()       # freed by the user, not yet queued (State.free)
        self.closed = False
        self._wake = queue.SimpleQueue()   # safe to put to from inside MPI's callbacks
        self._reaper = None

    def note(self, state):
        """``state``'s communicator was freed (State.free): a thread of ours frees the
        library's part soon, outside MPI (the noting itself makes no MPI call)."""
        self.noted.append(state)
        if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            self.release()           # no other thread may call MPI: here, as MPI_Comm_free's
            return
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, daemon=True, name="stragglar_mpi free")
            self._reaper.start()
        self._wake.put(None)

    def _reap(self):
        while True:
            self._wake.get()
            self.release()

    def release(self):
        """Release the states at the front that nothing holds (under ``lock``)."""
        with self.lock:
            while self.noted:
                state = self.noted.popleft()
                if not state.to_free:
                    state.to_free = True
                    self.queue.append(state)
            while self.queue and not self.closed and self.queue[0].holds == 0:
                self.queue.popleft()._release()

    def close(self):
        with self.lock:
            self.closed = True


_FREEING = _Freeing()


def _join_setups():
    # A setup thread still inside a blocking step (its communicator freed by the user, or
    # its operation done without it) would be inside MPI during MPI_Finalize: a crash in
    # UCX's progress.  Bounded as the engine's wait (STRAGGLAR_EXIT_TIMEOUT).
    try:
        bound = _config.current().exit_timeout
    except ValueError:
        bound = 60.0
    until = time.monotonic() + bound if bound else None
    for thread in PROCESS.live("setup"):
        thread.join(None if until is None else max(0.0, until - time.monotonic()))
    stuck = [t for t in PROCESS.live("setup") if t.is_alive()]
    if stuck:
        sys.stderr.write(f"stragglar_mpi: rank {MPI.COMM_WORLD.Get_rank()} exits with "
                         f"{len(stuck)} communicator setup(s) still running after "
                         f"{bound:g} s (STRAGGLAR_EXIT_TIMEOUT): a rank that never made "
                         "the communicator's first call?; exiting with status 1\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)


def _free_arrival_tables():
    # Before MPI_Finalize (core/lifetime.py says when, after the progress thread ended):
    # in key order on every rank.  From here on nothing is freed (_Freeing.closed); a
    # state an operation still holds (a join that gave up on it) keeps its tables.
    _join_setups()
    _FREEING.release()
    _FREEING.close()
    with _FREEING.lock:
        for state in sorted(PROCESS.live("arrivals"), key=lambda st: st.key):
            if state.holds:
                PROCESS.keep(state.arrival_tables())
            else:
                state.free_arrivals()


PROCESS.on_exit(ARRIVALS, _free_arrival_tables)


def _delete(comm, keyval, state):
    state.free()


KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete)


def setup_state(comm, deadline=0.0, bindings=None, collective=None) -> State:
    """The state of ``comm``, set up collectively in its first call (under ``deadline``);
    ``bindings`` and ``collective`` are what the call room gives a new one (State.setup).

    A setup that fails leaves a state behind that says why (``broken``), so that a
    later call raises instead of starting a second, mismatched setup.  A state that a
    nonblocking call is still setting up (``begin_setup``) is waited for."""
    _FREEING.release()          # communicators the user freed since (State.free)
    state = comm.Get_attr(KEYVAL)
    if state is None:
        state = State(bindings() if bindings else None)
        comm.Set_attr(KEYVAL, state)
        if _set_up(state, lambda: state.setup(comm, deadline, collective)):
            raise state.setup_error
        return state
    if not state.ready.is_set() and not _wait_ready(state, deadline):
        raise Pending([], _SETUP + ": a nonblocking call's setup of it has not ended")
    if state.broken:
        raise RuntimeError(f"stragglar_mpi: this communicator is unusable after: {state.broken}")
    return state


def begin_setup(comm, deadline=0.0, bindings=None, collective=None, blocking=False) -> State:
    """The state of ``comm`` for a nonblocking call: an existing one, or a new one whose
    setup the call starts (presence messages and Idup posted now, in call order) and a
    thread of its own finishes; its ``ready`` is set when it is over.  ``blocking``:
    finish it here instead (an MPI whose Idup must complete before the next collective)."""
    _FREEING.release()
    state = comm.Get_attr(KEYVAL)
    if state is not None:
        return state
    state = State(bindings() if bindings else None)
    comm.Set_attr(KEYVAL, state)
    if _set_up(state, lambda: state.join(comm, deadline), done=False):
        return state                 # the operation raises the error from Wait
    state.hold()                     # the setup's thread holds it too (a Free meanwhile waits)

    def rest():
        try:
            _set_up(state, lambda: state.finish(comm, deadline, collective))
        finally:
            state.unhold()
    if blocking:
        rest()
    else:
        thread = threading.Thread(target=rest, daemon=True, name="stragglar_mpi setup")
        PROCESS.register("setup", thread)      # the exit waits for it (_join_setups)
        thread.start()
    return state


def _set_up(state, step, done=True):
    """Run a part of the setup; True if it failed (``state.setup_error`` says why, and
    the state is broken and ready).  ``done``: the last part (the state is then ready)."""
    try:
        step()
    except BaseException as exc:
        state.broken = state.broken or f"its setup failed ({type(exc).__name__}: {exc})"
        state.setup_error = exc
        state.ready.set()
        return True
    if done:
        state.ready.set()
    return False


def _wait_ready(state, deadline):
    while not state.ready.wait(0.001):
        if deadline and MPI.Wtime() > deadline:
            return False
    return True


def peek(comm):
    """The state if the communicator has one, without creating it."""
    return comm.Get_attr(KEYVAL)
