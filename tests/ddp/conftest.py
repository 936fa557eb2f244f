"""Runs on every rank under mpiexec (tests/test_torch.py): the MPI tests' conftest (a
failed rank aborts the job, stacks before a kill), and one gloo process group per launch."""
import pytest

from mpi.conftest import comm, pytest_configure, pytest_sessionfinish, pytest_unconfigure  # noqa: F401

torch = pytest.importorskip("torch")


@pytest.fixture(scope="session", autouse=True)
def process_group():
    import torch.distributed as dist
    from stragglar_mpi.torch import init_process_group_from_mpi
    init_process_group_from_mpi()
    yield
    dist.destroy_process_group()
