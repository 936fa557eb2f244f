"""MPI control variables through the MPI tool interface (MPI_T), for the bench's native
variants: ``native-comp1`` and ``native-comp4`` run MPICH's SMP-aware AllReduce
compositions (MPIR_CVAR_ALLREDUCE_COMPOSITION = 1: node reduce, the roots' AllReduce,
node broadcast; = 4: multi-leader), set before the native call and put back after.

The functions are looked up with ctypes in the libmpi that mpi4py loaded (through the
extension module's own handle, whose dependencies include it).  An MPI without the
variable (Open MPI, Intel MPI) has no handle here: ``Cvar.open`` says why.
"""
from __future__ import annotations

import ctypes

from mpi4py import MPI

COMPOSITION = "MPIR_CVAR_ALLREDUCE_COMPOSITION"
#: bench variant -> (control variable, value)
VARIANTS = {"native-comp1": (COMPOSITION, 1), "native-comp4": (COMPOSITION, 4)}

_lib = None
_opened: dict = {}


def _library():
    global _lib
    if _lib is None:
        found = None
        for source in (MPI.__file__, None):
            try:
                lib = ctypes.CDLL(source)
                lib.MPI_T_cvar_get_index     # noqa: B018  (raises AttributeError when absent)
                found = lib
                break
            except (OSError, AttributeError):
                continue
        if found is None:
            raise LookupError("the loaded MPI library exposes no MPI_T_cvar_get_index")
        provided = ctypes.c_int()
        # The MPI's own thread level: Open MPI lowers what MPI_Query_thread reports to the
        # level MPI_T_init_thread asks for, and SINGLE made every later Iallreduce refuse.
        if found.MPI_T_init_thread(MPI.Query_thread(), ctypes.byref(provided)) != 0:
            raise LookupError("MPI_T_init_thread failed")
        _lib = found
    return _lib


class Cvar:
    """One integer control variable, bound to no object."""

    def __init__(self, lib, name, handle):
        self.lib, self.name, self.handle = lib, name, handle

    @classmethod
    def open(cls, name):
        """The variable ``name``; LookupError (with the reason) where this MPI lacks it."""
        if name in _opened:
            return _opened[name]
        lib = _library()
        index = ctypes.c_int()
        if lib.MPI_T_cvar_get_index(name.encode(), ctypes.byref(index)) != 0:
            raise LookupError(f"this MPI ({_version()}) has no control variable {name}")
        handle, count = ctypes.c_void_p(), ctypes.c_int()
        if lib.MPI_T_cvar_handle_alloc(index, None, ctypes.byref(handle), ctypes.byref(count)) != 0:
            raise LookupError(f"MPI_T_cvar_handle_alloc failed for {name}")
        if count.value != 1:
            raise LookupError(f"{name} holds {count.value} values, not one integer")
        _opened[name] = cvar = cls(lib, name, handle)
        return cvar

    def read(self) -> int:
        value = ctypes.c_int()
        if self.lib.MPI_T_cvar_read(self.handle, ctypes.byref(value)) != 0:
            raise RuntimeError(f"MPI_T_cvar_read failed for {self.name}")
        return value.value

    def write(self, value: int) -> None:
        if self.lib.MPI_T_cvar_write(self.handle, ctypes.byref(ctypes.c_int(value))) != 0:
            raise RuntimeError(f"MPI_T_cvar_write failed for {self.name} = {value}")


def _version():
    text = MPI.Get_library_version().strip().splitlines()
    return text[0] if text else "unknown"


def problem(variant):
    """None when ``variant`` can run here, else why not (the same on every rank)."""
    name, _ = VARIANTS[variant]
    try:
        Cvar.open(name)
    except LookupError as exc:
        return f"{variant} needs MPICH's {name}: {exc}"
    return None


class setting:
    """``with setting(variant):`` the variable at the variant's value, put back after."""

    def __init__(self, variant):
        self.name, self.value = VARIANTS[variant]

    def __enter__(self):
        self.cvar = Cvar.open(self.name)
        self.old = self.cvar.read()
        self.cvar.write(self.value)
        return self

    def __exit__(self, *exc):
        self.cvar.write(self.old)
        return False
