"""bind: the arguments of one call, checked as mpi4py checks them.

Knows: mpi4py's buffer rules and the errors it raises (``args``), the same-on-every-rank
check of STRAGGLAR_VALIDATE (``validate``).
Must not know: algorithms' schedules, how a call runs.
"""
