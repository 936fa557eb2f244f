"""core: the bottom layer that every other room may use.

Knows: the settings (``config``, every knob once, frozen), the errors a call raises,
what the MPI library supports (``features``), the library's message tags (``tags``),
how to talk to a set of peers under a deadline (``exchange``), what must outlive a call
(``lifetime``: one per process, one shutdown path) and a communicator's resources
(``state``: private duplicate, scratch, caches, freeing), its sequences of calls
(``sequences``), the order of its collectives (``turns``) and its setup (``setup``).
Must not know: algorithms, schedules' contents, buffers of the caller, policies.
"""
