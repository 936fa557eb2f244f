"""call: the public calls and what they record.

Knows: ``Allreduce`` (bind -> decide -> run -> record, ``allreduce``), the nonblocking and
persistent requests (``requests``), ``Comm`` (``comm``), per-communicator counters
(``record``) and the straggler report (``report``); its compiled part is the entry
(call/_entry.pyx).
Must not know: schedules' internals, memory backends' internals.
"""
