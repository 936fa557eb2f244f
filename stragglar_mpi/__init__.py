"""stragglar_mpi: an MPI AllReduce that hides the ReduceScatter in a straggler's delay.

    from stragglar_mpi import Allreduce
    Allreduce(comm, sendbuf, recvbuf, MPI.SUM)          # as comm.Allreduce(...)

    from stragglar_mpi import Comm
    comm = Comm(MPI.COMM_WORLD)                         # comm.Allreduce is ours

    req = Iallreduce(comm, sendbuf, recvbuf, MPI.SUM)   # ... compute ...; req.Wait()
    req = Allreduce_init(comm, sendbuf, recvbuf)        # req.Start(); req.Wait() every step
"""
# mpi4py first: importing mpi4py.MPI initialises MPI and loads the libmpi that
# the compiled transport links against.
from mpi4py import MPI  # noqa: F401

from ._built import require_build

require_build()

from .call._entry import Allreduce
from .call.requests import Allreduce_init, Iallreduce, stats
from .call.comm import Comm
from .core.config import configure
from .call.report import report
from .core.errors import Abandoned, StragglerTimeout
from ._version import __version__
from .schedule import Schedule, ScheduleError, synthesize, verify

__all__ = [
    "Allreduce",
    "Iallreduce",
    "Allreduce_init",
    "Comm",
    "stats",
    "configure",
    "report",
    "StragglerTimeout",
    "Abandoned",
    "Schedule",
    "ScheduleError",
    "synthesize",
    "verify",
    "__version__",
]
