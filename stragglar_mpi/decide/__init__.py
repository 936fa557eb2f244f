"""decide: which algorithm runs and who plays the straggler, the same on every rank.

Knows: arrival records (``arrival``, with one clock across nodes: ``clock``), the
nodes and their measured links (``topology``), every rewrite of the algorithm asked for
(``algorithm``: by the arguments, by the layout), the pure decisions on them (``policy``),
the synchronous AllReduce that measured fastest per size class (``tuning``) and how a
call takes its roles (``roles``).
Must not know: the caller's buffers, how a plan runs.
"""
