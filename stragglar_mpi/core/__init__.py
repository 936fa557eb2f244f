"""core: the lowest room above ``schedule``; every higher room may use it.

Knows: the settings (``config``, every knob once, frozen; the algorithm names it accepts
come from schedule/algorithms.py), the errors a call raises, what the MPI library
supports (``features``), the library's message tags (``tags``), the steps a call's path
waits on and their driver (``steps``), how to talk to a set of peers under a deadline
(``exchange``), what must outlive a call (``lifetime``: one per process, one bounded
shutdown path) and a communicator's resources (``state``: private duplicate, scratch
pools, caches, freeing), its sequences of calls (``sequences``), the order of its
collectives (``turns``, ``collective``) and its setup (``setup``).
Must not know: what an algorithm does, schedules' contents, buffers of the caller, policies.
"""
