"""Benchmark: StragglAR against native MPI, Ring and RHD with an injected straggler.

Run under ``mpiexec``::

    mpiexec -n 8 python -m stragglar_mpi.bench -b 1M -e 256M -f 2 --delay 300 \\
        --json run.json --plot run.png

Per size, every algorithm runs the same iterations (interleaved, so noise hits
all of them alike): a barrier, the straggler sleeps ``--delay`` then calls,
every other rank calls at once.  Post-arrival latency runs from the
straggler's call to the last rank's return, on clocks aligned to rank 0.  The
"bound" row on one node is one pairwise exchange of the whole buffer between
the straggler and one partner after the delay: its data must leave it and the
result must come back, so no AllReduce can finish sooner.  Across nodes it is
every node taking in the whole buffer at once, after the arrival (``_run._bound``).
"""
from ._sweep import main

__all__ = ["main"]
