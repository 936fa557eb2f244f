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
        self.repeat = None                # the last call's checked arguments (_args.Repeat)
        self._arrivals = None
        self.topology, self.node_comm, self.links = None, None, None
        self.node_early = {}              # straggler -> its node without it (hierarchical)
        if self.private.Get_size() > 1:
            self.arrivals()   # collective, like the Dup: both happen in the first call only
            self._setup_topology()
        self._scratch = np.empty(0, dtype=np.uint8)

    def _setup_topology(self):
        """Nodes and, across several nodes, link figures for ``auto`` (collective, once)."""
        from . import _config, _topology
        self.topology, self.node_comm = _topology.discover(self.private)
        if self.topology.flat:
            return
        model = _config.current().model
        if len(model) == 5:
            self.links = _topology.Links(model[0], model[1], model[3], model[4])
        else:
            self.links = _topology.measure(self.private, self.topology)

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
            sub = self.node_comm.Create_group(early, _TAG_SUBCOMM + 1)
            early.Free()
            group.Free()
            self.node_early[straggler] = sub
        return sub

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
        for sub in list(self.early_comms.values()) + list(self.node_early.values()):
            if sub is not None:
                sub.Free()
        self.early_comms.clear()
        self.node_early.clear()
        if self.node_comm is not None:
            self.node_comm.Free()
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
