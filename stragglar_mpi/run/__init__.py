"""run: phase 1 and a rank's plan, executed.

Knows: the plan compiler (``plan``: a schedule's rounds for one rank, as rows), a rank's
program for an algorithm (``programs``: phase 1 and the plan, flat or two-tier, cached),
the compiled interpreter (``_interpreter``, built from cython_src/run/: a ``machine`` per
plan and the blocking ``drive``r),
native MPI calls (``native``), device memory staged through the host (``staged``) and
the one executor of a decided call (``execute``).
Must not know: policies, arrival, why an algorithm was chosen.
"""
