# The blocking driver: a call's path run to its end in the caller's thread.

from ..core.steps import Wait as _Wait


def drive(gen):
    """Run ``gen``, a generator of steps (core/steps.py), to its end in this thread: each
    step it yields is polled to its end here (a plan ``Machine``, or a ``Wait`` as a
    ``Waiting``: test and yield, the GIL released) and its outcome sent back; returns
    what ``gen`` returns, raises what it raises.  The progress thread drives the same
    generators for nonblocking calls (``serve``)."""
    value, error = None, None
    while True:
        try:
            step = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            if type(step) is _Wait:
                step = Waiting(step.requests, step.until, step.need, step.probe)
            value = step.run()
        except BaseException as exc:
            error = exc
