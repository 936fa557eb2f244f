"""What the library keeps per communicator, attached to it as an MPI attribute.

Our messages travel on a private duplicate, so a user's point-to-point traffic on
the same communicator is never matched by ours.  Sub-communicators of the early
ranks are made with ``Create_group``, which only the early ranks call: the
straggler is never waited for while they are built.
"""
from __future__ import annotations

import atexit
import os
import weakref
from collections import Counter, OrderedDict, deque

import numpy as np
from mpi4py import MPI

try:
    from . import _bind
except ImportError:   # a source checkout without the build
    _bind = None

_TAG_SUBCOMM = 4242
#: Sub-communicators of early ranks kept per user communicator (MPICH has ~2048 context ids).
EARLY_COMMS = 8


class State:
    def __init__(self, comm):
        self.private = MPI.Intracomm(MPI.Intracomm.Dup(comm))
        # The same key on every member: windows are freed at exit in key order,
        # so ranks that share several communicators never wait on each other crosswise.
        self.key = self.private.bcast((MPI.Wtime(), os.getpid(), id(self)), root=0)
        self.early_comms = OrderedDict()  # straggler -> its early ranks' comm (None on it), LRU
        self.calls = Counter()
        self.last = None                  # the last call, as _allreduce._record keeps it
        self.history = deque(maxlen=64)   # arrival records of earlier tracked calls
        self.auto_calls = 0               # "auto" calls above the small-size cut
        self.next_pair, self.pair_gap = 1, 1  # when "auto" records arrivals next (_allreduce._sampled)
        self.tracked_seq = None           # arrival-table number of the last tracked call
        self.broken = None                # why this state is unusable (after a timeout)
        self.bindings = _bind.Bindings() if _bind else None   # earlier calls' checks (_bind.pyx)
        self.log = None                   # what tracked calls ran, for the report (_report.Log)
        self._arrivals = None
        if self.private.Get_size() > 1:
            self.arrivals()   # collective, like the Dup: both happen in the first call only
        self._scratch = np.empty(0, dtype=np.uint8)

    def arrivals(self):
        """The shared arrival table (made collectively with the state, in the first call)."""
        if self._arrivals is None:
            from ._arrival import Arrivals
            self._arrivals = Arrivals(self.private)
            _WITH_WINDOWS.add(self)
        return self._arrivals

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

    def early_comm(self, straggler):
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
            sub = self.private.Create_group(early, _TAG_SUBCOMM)
            early.Free()
            group.Free()
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
        for sub in self.early_comms.values():
            if sub is not None:
                sub.Free()
        self.early_comms.clear()
        self.private.Free()


_WITH_WINDOWS = weakref.WeakSet()


@atexit.register
def _free_windows():
    # Runs before mpi4py finalizes MPI (atexit is last-in, first-out): windows
    # still open at MPI_Finalize make some transports complain.
    for state in sorted(_WITH_WINDOWS, key=lambda st: st.key):
        state.free_arrivals()


def _delete(comm, keyval, state):
    state.free()


KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete)


def state_of(comm) -> State:
    state = comm.Get_attr(KEYVAL)
    if state is None:
        state = State(comm)
        comm.Set_attr(KEYVAL, state)
    return state


def peek(comm):
    """The state if the communicator has one, without creating it."""
    return comm.Get_attr(KEYVAL)
