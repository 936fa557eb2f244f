"""Test layout.

unit/  : pure Python, no MPI processes.
mpi/   : test bodies that run on every rank under ``mpiexec -n N``; launched by
         test_mpi.py for several N.  They are collected only
         inside such a launch (SMPI_TEST_IN_MPIEXEC=1).
ddp/   : the same for the PyTorch DDP hook (stragglar_mpi/torch.py), launched by
         test_torch.py; skipped where torch is not installed.
"""
import os

collect_ignore = [] if os.environ.get("SMPI_TEST_IN_MPIEXEC") else ["mpi", "ddp"]


import pytest  # noqa: E402


@pytest.fixture
def setenv(monkeypatch):
    """``setenv(NAME=value, OTHER=None)``: change STRAGGLAR_* variables (None unsets) and
    re-read the settings, as a job must (``stragglar_mpi.configure()``); undone afterwards."""
    from stragglar_mpi import configure

    def change(**values):
        for name, value in values.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))
        return configure()

    yield change
    monkeypatch.undo()
    configure()


def pytest_collection_modifyitems(config, items):
    """SMPI_TEST_NO_WALLCLOCK=1 deselects the tests that assert on wall-clock time (marker
    ``wallclock``), here and in every MPI launch (which inherits the variable)."""
    if not os.environ.get("SMPI_TEST_NO_WALLCLOCK"):
        return
    keep = [item for item in items if item.get_closest_marker("wallclock") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
