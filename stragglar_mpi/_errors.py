"""Errors raised on every waiting rank when a call cannot complete."""
from __future__ import annotations


class StragglerTimeout(TimeoutError):
    """A rank did not arrive (or a message did not come) within STRAGGLAR_TIMEOUT seconds.

    ``missing``: ranks that had not entered the call (when known); ``phase``: what
    this rank was doing; ``peers``: ranks whose messages this rank was waiting for.
    After it, this communicator's library state is unusable: abort the job
    (``comm.Abort()``) or stop using the communicator.
    """

    def __init__(self, message, missing=(), phase=None, peers=()):
        super().__init__(message)
        self.missing = tuple(missing)
        self.phase = phase
        self.peers = tuple(peers)


class Pending(Exception):
    """Internal: the executor gave up waiting; ``peers`` had not answered."""

    def __init__(self, peers):
        super().__init__(peers)
        self.peers = tuple(peers)
