"""Run mpi4py's own Allreduce, Iallreduce, Allreduce_init, Op and zero-size message tests
with ``stragglar_mpi.Comm``.

    mpiexec -n 4 python tests/mpi4py_suite/run.py PATH/TO/mpi4py-X.Y.Z/test

The test modules are mpi4py's, unchanged, from its source distribution
(tests/test_mpi4py_suite.py downloads it from PyPI).  After importing each module
this runner swaps its communicators: every test class's ``COMM`` that is
``MPI.COMM_SELF`` or ``MPI.COMM_WORLD`` becomes ``Comm(...)`` of it, and the
module's ``MPI`` becomes a view of mpi4py.MPI whose ``COMM_SELF`` and
``COMM_WORLD`` are those ``Comm`` objects (so ``MPI.COMM_WORLD.Dup()`` in a
``setUp`` and ``for comm in [MPI.COMM_SELF, MPI.COMM_WORLD]`` in a test body run
ours too).  Everything else is mpi4py's.  Without SMPI_MPI4PY_GPU=1 the GPU array backends
(numba, cupy) are hidden from mpi4py's array loop: their device arrays need a GPU.
"""
import importlib
import os
import sys
import types
import unittest

from mpi4py import MPI

from stragglar_mpi import Comm, stats

MODULES = {"test_cco_buf": "Allreduce", "test_op": None, "test_msgzero": None}
NONBLOCKING = {"test_cco_nb_buf": "Allreduce", "test_cco_pr_buf": "Allreduce"}
WORLD, SELF = Comm(MPI.COMM_WORLD), Comm(MPI.COMM_SELF)


class _MPIView(types.ModuleType):
    """mpi4py.MPI with the two predefined communicators wrapped."""

    def __init__(self):
        super().__init__("mpi4py.MPI")
        self.COMM_WORLD, self.COMM_SELF = WORLD, SELF

    def __getattr__(self, name):
        return getattr(MPI, name)


def wrapped(module):
    module.MPI = _MPIView()
    for value in vars(module).values():
        if isinstance(value, type) and "COMM" in vars(value):
            comm = vars(value)["COMM"]
            if comm == MPI.COMM_WORLD:
                value.COMM = WORLD
            elif comm == MPI.COMM_SELF:
                value.COMM = SELF
    return module


def suite(names):
    loader = unittest.TestLoader()
    tests = unittest.TestSuite()
    for name, pattern in names.items():
        module = wrapped(importlib.import_module(name))
        if pattern:
            loader.testNamePatterns = [f"*{pattern}*"]
        else:
            loader.testNamePatterns = None
        tests.addTests(loader.loadTestsFromModule(module))
    return tests


def main(test_dir):
    sys.path.insert(0, test_dir)
    if not os.environ.get("SMPI_MPI4PY_GPU"):
        # mpi4py's arrayimpl loops over every array backend it can import; without a GPU
        # its numba/cupy device arrays fail natively too.  SMPI_MPI4PY_GPU=1 keeps them.
        sys.modules["numba"] = sys.modules["cupy"] = None
    runner = unittest.TextTestRunner(verbosity=0 if MPI.COMM_WORLD.Get_rank() else 1,
                                     stream=sys.stderr)
    blocking = runner.run(suite(MODULES))
    before = _our_calls()
    nonblocking = runner.run(suite(NONBLOCKING))
    ours, ours_nb = before, _our_calls() - before
    bad = sum(len(r.failures) + len(r.errors) for r in (blocking, nonblocking))
    bad_anywhere = MPI.COMM_WORLD.allreduce(bad)
    ran = MPI.COMM_WORLD.allreduce(blocking.testsRun + nonblocking.testsRun, op=MPI.MIN)
    ran_nb = MPI.COMM_WORLD.allreduce(nonblocking.testsRun, op=MPI.MIN)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"mpi4py suite with stragglar_mpi.Comm on {MPI.COMM_WORLD.Get_size()} ranks: "
              f"{ran} tests, {bad_anywhere} failed or errored; {ours} Allreduce calls on COMM_WORLD "
              f"went through stragglar_mpi; nonblocking: {ran_nb} tests, {ours_nb} Iallreduce and "
              "Allreduce_init calls on COMM_WORLD went through stragglar_mpi")
    return 1 if bad_anywhere or not ours or not ours_nb else 0


def _our_calls():
    return sum(stats(WORLD)["calls"].values())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
