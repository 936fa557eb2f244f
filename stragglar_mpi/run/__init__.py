"""run: phase 1 and a rank's plan, executed.

Knows: the plan compiler (``plan``: a schedule's rounds for one rank, as rows), a rank's
program for an algorithm (``programs``: phase 1 and the plan, flat or two-tier, cached),
the compiled interpreter's machine for a plan (``transport``, run/_interpreter.pyx),
native MPI calls (``native``), device memory staged through the host (``staged``) and
the one executor of a decided call (``execute``).
Must not know: policies, arrival, why an algorithm was chosen.
"""
