"""What must outlive a call, owned by one object per process with one shutdown path.

``PROCESS`` holds:
- ``kept``: buffers MPI may still write (a failed call's scratch, requests given up
  on): never freed while the process runs;
- ``live(kind)``: the live objects of a kind that the exit must visit (weakly held).

At exit (before mpi4py finalizes MPI: its handler was registered first, atexit runs
last-in first-out) ``shutdown`` runs the registered steps in this order:
1. ``ENGINE``: the progress thread runs the nonblocking operations still queued, and ends;
2. ``REPORT``: the STRAGGLAR_REPORT straggler reports print;
3. ``WATCHDOG``: the stall watchdog's thread ends (call/watchdog.py);
4. ``TRACE``: under STRAGGLAR_TRACE each rank writes its flight record (call/flight.py);
5. ``SETUPS``: communicator setups still running in threads of their own are joined;
6. ``ARRIVALS``: arrival tables cancel their receives, in the same key order on every rank.
A step that waits for the library's threads waits at most STRAGGLAR_EXIT_TIMEOUT
(``bounded_exit``).
"""
from __future__ import annotations

import atexit
import os
import sys
import weakref

from mpi4py import MPI

from . import config as _config

ENGINE, REPORT, WATCHDOG, TRACE, SETUPS, ARRIVALS = 10, 20, 22, 24, 25, 30


class Lifetime:
    def __init__(self):
        self.kept = []
        self._live = {}
        self._steps = []

    def keep(self, *buffers):
        self.kept.extend(buffers)

    def register(self, kind, obj):
        self._live.setdefault(kind, weakref.WeakSet()).add(obj)

    def live(self, kind):
        return list(self._live.get(kind, ()))

    def on_exit(self, order, step):
        self._steps.append((order, step))

    def shutdown(self):
        for _, step in sorted(self._steps, key=lambda s: s[0]):
            step()


PROCESS = Lifetime()
atexit.register(PROCESS.shutdown)


def bounded_exit(wait, still):
    """An exit step's wait: ``wait(bound)`` (seconds, None: no bound) is True once what it
    waits for has ended.  Past STRAGGLAR_EXIT_TIMEOUT the process prints ``still()``'s
    (what is still running, what it is and why) and exits with status 1: its
    MPI_Finalize would wait for it, and the job with it."""
    bound = _config.exit_timeout()
    if wait(bound):
        return
    what, why = still()
    sys.stderr.write(f"stragglar_mpi: rank {MPI.COMM_WORLD.Get_rank()} exits with {what} after "
                     f"{bound:g} s (STRAGGLAR_EXIT_TIMEOUT){why}; exiting with status 1\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)
