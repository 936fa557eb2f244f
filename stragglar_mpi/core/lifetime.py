"""What must outlive a call, owned by one object per process with one shutdown path.

``PROCESS`` holds:
- ``kept``: buffers MPI may still write (a failed call's scratch, requests given up
  on): never freed while the process runs;
- ``lingering``: (requests, buffers) of sends left to complete on their own;
- ``threads``: background threads that may still be inside MPI, with the
  communicator each uses (it is not freed while one is alive);
- ``live(kind)``: the live objects of a kind that the exit must visit (weakly held).

At exit (before mpi4py finalizes MPI: its handler was registered first, atexit runs
last-in first-out) ``shutdown`` runs the registered steps in this order:
1. ``LANES``: nonblocking lanes run what is queued and free their duplicates;
2. ``REPORT``: the STRAGGLAR_REPORT straggler reports print;
3. ``ARRIVALS``: arrival tables cancel their receives, in the same key order on every rank;
4. ``THREADS``: background threads get a grace period, then those waiting are stopped.
"""
from __future__ import annotations

import atexit
import sys
import threading
import weakref

LANES, REPORT, ARRIVALS, THREADS = 10, 20, 30, 40


class Lifetime:
    def __init__(self):
        self.kept = []
        self.lingering = []
        self.threads = []
        self.stop = threading.Event()      # set at exit: background waits end
        self._live = {}
        self._steps = []

    def keep(self, *buffers):
        self.kept.extend(buffers)

    def linger(self, requests, buffers):
        """Keep ``buffers`` until ``requests`` complete (tested at the next linger)."""
        from mpi4py import MPI
        self.lingering[:] = [(r, b) for r, b in self.lingering if not MPI.Request.Testall(r)]
        self.lingering.append((requests, buffers))

    def track(self, thread, comm):
        self.threads[:] = [(t, c) for t, c in self.threads if t.is_alive()]
        self.threads.append((thread, comm))

    def in_use(self, comm):
        """Whether a background thread may still call MPI on ``comm``."""
        return any(t.is_alive() and c is comm for t, c in self.threads)

    def register(self, kind, obj):
        self._live.setdefault(kind, weakref.WeakSet()).add(obj)

    def live(self, kind):
        return list(self._live.get(kind, ()))

    def on_exit(self, order, step):
        self._steps.append((order, step))

    def shutdown(self):
        for _, step in sorted(self._steps, key=lambda s: s[0]):
            step()

    def end_threads(self, grace=2.0):
        """Give the background threads ``grace`` seconds (a late rank's values may be on
        the way), then stop those still waiting.  One blocked inside a collective cannot
        be stopped: say so."""
        import time
        until = time.monotonic() + grace
        for t, _ in self.threads:
            t.join(max(0.0, until - time.monotonic()))
        self.stop.set()
        for t, _ in self.threads:
            t.join(0.5)
        if any(t.is_alive() for t, _ in self.threads):
            print("stragglar_mpi: a Create_group given up after a timeout is still blocked at exit; "
                  "MPI_Finalize may fail (after a timeout, abort the job: README)", file=sys.stderr)


PROCESS = Lifetime()
PROCESS.on_exit(THREADS, PROCESS.end_threads)
atexit.register(PROCESS.shutdown)
