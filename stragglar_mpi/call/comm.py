"""``Comm``: an ``MPI.Intracomm`` whose ``Allreduce``, ``Iallreduce`` and ``Allreduce_init`` are ours.

A program switches by wrapping its communicator once: ``comm = Comm(MPI.COMM_WORLD)``.
Every communicator made from it is one of ours too: ``Dup``, ``Split``, ``Create``,
``Create_group``, ``Create_from_group`` give a ``Comm``; ``Create_cart``,
``Create_graph``, ``Create_dist_graph(_adjacent)`` give a ``Comm`` that is also an
``MPI.Cartcomm`` / ``Graphcomm`` / ``Distgraphcomm`` (topology methods intact);
``Create_intercomm`` gives an ``InterComm``, whose ``Merge`` gives a ``Comm`` again.
An intercommunicator's ``Allreduce`` is mpi4py's (StragglAR needs one group).
"""
from __future__ import annotations

from mpi4py import MPI

from ._entry import comm_allreduce
from .requests import Allreduce_init as _allreduce_init
from .requests import Iallreduce as _iallreduce


def _wrap(new):
    """The library's class for a communicator that mpi4py made."""
    if new == MPI.COMM_NULL:
        return new
    for base, ours in _CLASSES:
        if isinstance(new, base):
            return new if isinstance(new, ours) else ours(new)
    return new


class Comm(MPI.Intracomm):
    """``MPI.Intracomm`` with StragglAR behind ``Allreduce``; made with ``Comm(comm)``."""

    Allreduce = comm_allreduce      # the compiled entry itself: no Python frame in between

    def Iallreduce(self, sendbuf, recvbuf, op=MPI.SUM):
        """``Iallreduce`` as mpi4py's, run by ``stragglar_mpi.Iallreduce`` with its defaults."""
        return _iallreduce(self, sendbuf, recvbuf, op)

    def Allreduce_init(self, sendbuf, recvbuf, op=MPI.SUM, info=MPI.INFO_NULL):
        """``Allreduce_init`` as mpi4py's (``info`` is accepted and unused), run by
        ``stragglar_mpi.Allreduce_init`` with its defaults."""
        return _allreduce_init(self, sendbuf, recvbuf, op)

    # mpi4py returns type(self) from Dup, Dup_with_info and Idup, but its own
    # classes from these:
    def Split(self, color=0, key=0):
        return _wrap(super().Split(color, key))

    def Split_type(self, split_type, key=0, info=MPI.INFO_NULL):
        return _wrap(super().Split_type(split_type, key, info))

    def Create(self, group):
        return _wrap(super().Create(group))

    def Create_group(self, group, tag=0):
        return _wrap(super().Create_group(group, tag))

    def Create_cart(self, dims, periods=None, reorder=False):
        return _wrap(super().Create_cart(dims, periods, reorder))

    def Create_graph(self, index, edges, reorder=False):
        return _wrap(super().Create_graph(index, edges, reorder))

    def Create_dist_graph(self, sources, degrees, destinations, weights=None,
                          info=MPI.INFO_NULL, reorder=False):
        return _wrap(super().Create_dist_graph(sources, degrees, destinations, weights, info, reorder))

    def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None,
                                   destweights=None, info=MPI.INFO_NULL, reorder=False):
        return _wrap(super().Create_dist_graph_adjacent(sources, destinations, sourceweights,
                                                        destweights, info, reorder))

    def Create_intercomm(self, local_leader, peer_comm, remote_leader, tag=0):
        return _wrap(super().Create_intercomm(local_leader, peer_comm, remote_leader, tag))

    @classmethod
    def Create_from_group(cls, group, stringtag="org.mpi4py", info=MPI.INFO_NULL,
                          errhandler=None):
        return _wrap(MPI.Intracomm.Create_from_group(group, stringtag, info, errhandler))


class CartComm(Comm, MPI.Cartcomm):
    """A Cartesian ``Comm`` (from ``Comm.Create_cart``)."""

    def Sub(self, remain_dims):
        return _wrap(super().Sub(remain_dims))


class GraphComm(Comm, MPI.Graphcomm):
    """A graph ``Comm`` (from ``Comm.Create_graph``)."""


class DistGraphComm(Comm, MPI.Distgraphcomm):
    """A distributed-graph ``Comm`` (from ``Comm.Create_dist_graph``)."""


class InterComm(MPI.Intercomm):
    """An intercommunicator made from a ``Comm``: ``Merge`` gives a ``Comm`` back.
    ``Allreduce`` runs natively (mpi4py's)."""

    Allreduce = comm_allreduce      # the entry's miss runs it natively (call/allreduce.handled)

    def Merge(self, high=False):
        return _wrap(super().Merge(high))

    def Split(self, color=0, key=0):
        return _wrap(super().Split(color, key))

    def Create(self, group):
        return _wrap(super().Create(group))

    @classmethod
    def Create_from_groups(cls, local_group, local_leader, remote_group, remote_leader,
                           stringtag="org.mpi4py", info=MPI.INFO_NULL, errhandler=None):
        return _wrap(MPI.Intercomm.Create_from_groups(local_group, local_leader, remote_group,
                                                      remote_leader, stringtag, info, errhandler))


_CLASSES = ((MPI.Cartcomm, CartComm), (MPI.Graphcomm, GraphComm),
            (MPI.Distgraphcomm, DistGraphComm), (MPI.Intercomm, InterComm), (MPI.Intracomm, Comm))
