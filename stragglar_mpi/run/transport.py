"""Run a plan: the compiled interpreter's machine for it (run/_interpreter.pyx ``Machine``).

The machine posts a round's messages once the previous round's are complete and its
local work synchronised, over a memory backend's local operations (_memory): host
loops, or device kernels.  Whoever drives the call (core/steps.py: the caller's
thread, the progress thread) polls it to its end.
"""
from __future__ import annotations

from . import _interpreter


def machine(plan, addresses, comm, datatype, op, deadline=0.0, local=None, rounds=None, tag0=0):
    """The ``Machine`` that runs ``plan`` (None for a plan without rows); its outcome is
    the MPI_Wtime at which its first receive completed (or None).

    Past ``deadline`` (an MPI_Wtime; 0 = never) the outstanding requests are
    cancelled and it raises ``Pending(peers)``.  ``local``: the memory backend's local
    operations (None: host memory; see _memory).  ``rounds``: None, or told
    ``begin(round)`` before each round's messages are posted and ``end(round)`` once
    they are complete and its local work done (run/staged.py, bench/rounds.py).  Round
    r's messages carry tag ``tag0 + r % tags.ROUND_TAGS`` (the sequence's tags).
    """
    if plan.rows.shape[0] == 0:
        return None
    return _interpreter.Machine(plan.rows, tuple(addresses), comm, datatype, op,
                                plan.max_requests, _interpreter.loop_id(datatype, op), deadline,
                                local, rounds, tag0)
