"""run: phase 1 and a rank's plan, executed.

Knows: the plan compiler (``plan``: a schedule's rounds for one rank, as rows), phase 1
among the early ranks (``phases``), the interpreter's Python side and its compiled
twin (``transport``, run/_interpreter.pyx), native MPI calls (``native``),
the two-tier algorithm (``hierarchical``), device memory staged through the host
(``staged``) and the dispatch of one decided call (``execute``).
Must not know: policies, arrival, why an algorithm was chosen.
"""
