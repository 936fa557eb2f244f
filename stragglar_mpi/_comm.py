"""``Comm``: an ``MPI.Intracomm`` whose ``Allreduce`` is ours.

A program switches by wrapping its communicator once: ``comm = Comm(MPI.COMM_WORLD)``.
Every communicator made from it is a ``Comm`` too.
"""
from __future__ import annotations

from mpi4py import MPI

from ._allreduce import Allreduce as _allreduce
from ._allreduce import _bind


def _wrap(new):
    return new if new == MPI.COMM_NULL else Comm(new)


class Comm(MPI.Intracomm):
    """``MPI.Intracomm`` with StragglAR behind ``Allreduce``; made with ``Comm(comm)``."""

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM):
        """``Allreduce`` as mpi4py's, run by ``stragglar_mpi.Allreduce`` with its defaults."""
        _allreduce(self, sendbuf, recvbuf, op)

    if _bind is not None:             # the compiled entry itself: no Python frame in between
        _bind.comm_allreduce.__doc__ = Allreduce.__doc__
        Allreduce = _bind.comm_allreduce

    # mpi4py returns type(self) from Dup, Dup_with_info and Idup, but plain
    # Intracomm from these:
    def Split(self, color=0, key=0):
        return _wrap(super().Split(color, key))

    def Split_type(self, split_type, key=0, info=MPI.INFO_NULL):
        return _wrap(super().Split_type(split_type, key, info))

    def Create(self, group):
        return _wrap(super().Create(group))

    def Create_group(self, group, tag=0):
        return _wrap(super().Create_group(group, tag))

    @classmethod
    def Create_from_group(cls, group, stringtag="org.mpi4py", info=MPI.INFO_NULL,
                          errhandler=None):
        return _wrap(MPI.Intracomm.Create_from_group(group, stringtag, info, errhandler))
