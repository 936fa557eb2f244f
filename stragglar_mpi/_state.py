"""What the library keeps per communicator, attached to it as an MPI attribute.

Our messages travel on a private duplicate, so a user's point-to-point traffic on
the same communicator is never matched by ours.  Sub-communicators of the early
ranks are made with ``Create_group``, which only the early ranks call: the
straggler is never waited for while they are built.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
from mpi4py import MPI

_TAG_SUBCOMM = 4242


class State:
    def __init__(self, comm):
        self.private = MPI.Intracomm(MPI.Intracomm.Dup(comm))
        self.early_comms = {}
        self.calls = Counter()
        self.last = {}
        self._scratch = np.empty(0, dtype=np.uint8)

    def early_comm(self, straggler):
        """Intracomm of every rank but ``straggler``, in rank order (call on early ranks)."""
        sub = self.early_comms.get(straggler)
        if sub is None:
            group = self.private.Get_group()
            early = group.Excl([straggler])
            sub = self.private.Create_group(early, _TAG_SUBCOMM)
            early.Free()
            group.Free()
            self.early_comms[straggler] = sub
        return sub

    def scratch(self, nbytes):
        if self._scratch.nbytes < nbytes:
            self._scratch = np.empty(nbytes, dtype=np.uint8)
        return self._scratch

    def free(self):
        if MPI.Is_finalized():
            return
        for sub in self.early_comms.values():
            sub.Free()
        self.early_comms.clear()
        self.private.Free()


def _delete(comm, keyval, state):
    state.free()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete)


def state_of(comm) -> State:
    state = comm.Get_attr(_KEYVAL)
    if state is None:
        state = State(comm)
        comm.Set_attr(_KEYVAL, state)
    return state


def peek(comm):
    """The state if the communicator has one, without creating it."""
    return comm.Get_attr(_KEYVAL)
