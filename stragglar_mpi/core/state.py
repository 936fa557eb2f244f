"""What the library keeps per communicator, attached to it as an MPI attribute.

Our messages travel on a private duplicate, so a user's point-to-point traffic on
the same communicator is never matched by ours.  Phase 1 and phase 2 are plans run on
that duplicate (run/programs.py), so the library makes no sub-communicator of the early
ranks, nor of a node.  A user communicator costs two MPI communicators, whatever
its calls: the private duplicate and the arrival tables' duplicate (the node
communicator that finds the layout at setup is freed at once).

A ``State`` is the sequence of the communicator's blocking calls (core/sequences.py)
and owns its lanes and turns (core/turns.py); core/setup.py makes and sets it up.

Freeing a communicator with operations pending (MPI: they complete normally): each
nonblocking operation holds its state from its call (``hold``, the caller's thread) to
its end (``unhold``, the progress thread), and so does a setup on its thread.  The user's
``Free`` (the attribute's delete callback, ``free``) with holds outstanding only marks
the state; the last ``unhold`` frees the library's communicators and arrival tables
then.  States are freed in the order the user freed them (the same on every rank), never
by a thread other than the one whose operation ended, never after the exit has freed
the arrival tables (MPI_Finalize follows): see ``_Freeing``.
"""
from __future__ import annotations

import queue
import threading
from collections import Counter, deque

from mpi4py import MPI

from .lifetime import ARRIVALS, PROCESS
from .sequences import LANES, Lane, Sequence
from .turns import Turn, Turns


class State(Sequence):
    """One communicator's library state, and the sequence of its blocking calls.
    ``bindings``: the compiled entry's cache of earlier calls' checks
    (cython_src/call/_entry.pyx), made by the entry at its first binding."""

    def __init__(self, bindings=None):
        super().__init__(self, 0)
        self.private = None               # the private duplicate (core/setup.py)
        self.key = None
        self.calls = Counter()
        self.last = None                  # the last call: a call.record.CallRecord
        self.broken = None                # why the state is unusable (a timeout, a mismatch), or None
        self._abandoned = False           # a call died mid-way: keep the MPI objects (free)
        self.bindings = bindings
        self._arrivals = None             # what the arrival tables share (decide/roles.setup)
        self.topology, self.links = None, None   # the layout and, across nodes, its links
        self.pools = {}                  # memory backends' scratch, per operation (memory/host.Pool)
        self.lanes = []                   # the nonblocking lanes made so far
        self.started = 0                  # nonblocking operations started (Iallreduce, Allreduce_init)
        self.turns = Turns()
        self.blocking = Turn(self.turns)  # the turn of every blocking call: no ticket
        self.lock = threading.Lock()      # the counters: blocking calls and the progress thread
        self.ready = threading.Event()    # set once the setup is over (well or not)
        self.setup_error = None           # what a setup on a thread raised
        self._holds = 0                   # operations (and a setup thread) not yet ended: hold()
        self.to_free = False              # the user freed the communicator (free)
        self.freed = False                # the library's communicators are freed (or kept for good)

    # --- what the setup made ------------------------------------------------------------

    def keep_arrivals(self, base):
        """Keep what the arrival tables share (made at setup); freed with the state or at exit."""
        self._arrivals = base
        PROCESS.register("arrivals", self)

    def arrival_tables(self):
        """What the sequences' arrival tables share (decide/roles.Tables), or None."""
        return self._arrivals

    def set_private(self, private):
        """The private duplicate, once every member has joined it (core/setup.py)."""
        self.private = private

    def set_layout(self, topology, links):
        self.topology, self.links = topology, links

    def lane(self, k):
        """Lane ``k`` (1..LANES), made at its first operation (nothing collective)."""
        while len(self.lanes) < k:
            self.lanes.append(Lane(self, len(self.lanes) + 1))
        return self.lanes[k - 1]

    def next_lane(self):
        """The lane of the next nonblocking operation: the k-th (k = 0, 1, ...) takes lane
        1 + k % LANES (the same on every rank: every rank counts the same calls)."""
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
            seq.table = None

    def _release(self):
        # Under _FREEING.lock, no operation holding the state (free, unhold).
        self.freed = True
        if MPI.Is_finalized():
            return
        self.free_arrivals()
        if self.private is None:
            return
        if self._abandoned:
            # A call died in the middle (an error that is not a timeout): ranks may have
            # posted different things on the library's communicators, so they are kept,
            # not freed (freeing them so left a later MPI_Comm_split_type hanging on Open MPI).
            PROCESS.keep(self.private)
        else:
            self.private.Free()


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


def release_freed():
    """Release the states of communicators the user freed since (State.free) that no
    operation holds any more."""
    _FREEING.release()


def _free_arrival_tables():
    # Before MPI_Finalize (core/lifetime.py says when, after the progress thread ended
    # and the setups' threads were joined): in key order on every rank.  From here on
    # nothing is freed (_Freeing.closed); a state an operation still holds (a join that
    # gave up on it) keeps its tables.
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


def peek(comm):
    """The state if the communicator has one, without creating it."""
    return comm.Get_attr(KEYVAL)
