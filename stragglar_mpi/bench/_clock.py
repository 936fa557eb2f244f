"""A clock common to all ranks (the library's own estimate, shared with the bench)."""
from ..decide.clock import offsets

__all__ = ["offsets"]
