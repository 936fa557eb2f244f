"""PyTorch DistributedDataParallel with StragglAR: a comm hook that averages every gradient
bucket through ``Iallreduce`` (docs/TORCH.md).

    import stragglar_mpi.torch as smpi_torch
    smpi_torch.init_process_group_from_mpi()      # gloo; rank, size and port from MPI
    model = DistributedDataParallel(net)
    smpi_torch.register(model)                    # its buckets go through StragglAR

The hook means what DDP's default one means: each rank divides its bucket by the world
size and the buckets are summed.  It returns at once; the progress thread completes the
future when the operation ends (``Request.on_done``), so later buckets' backward work
overlaps earlier buckets' communication, and an error (a ``StragglerTimeout``) reaches
the future, on every rank.  Needs the ``torch`` extra (``pip install "stragglar_mpi[torch]"``).
"""
import os
import socket
import time

# mpi4py before torch: importing mpi4py.MPI initialises MPI (the package's own order).
from mpi4py import MPI

import torch
import torch.distributed as dist

from .call.requests import Iallreduce

__all__ = ["register", "hook", "HookState", "init_process_group_from_mpi", "check_world"]

#: Bucket dtypes reduced in place, through a zero-copy numpy view (CPU) or the device path.
_DIRECT = (torch.float32, torch.float64)
#: Bucket dtypes reduced through a float32 copy: the average is computed in float32 and
#: rounded once to the bucket's dtype (DDP's default hook sums in the bucket's dtype).
_WIDENED = (torch.float16, torch.bfloat16)
_KWARGS = ("straggler", "algorithm")


class HookState:
    """What the hook of one DDP model uses: its communicator (a duplicate of the caller's,
    so that two models' buckets never share an order of collectives), the world size it
    divides by, and the arguments of every ``Iallreduce`` (``straggler``, ``algorithm``).

    ``trace``: None, or a list to which every bucket appends a dict once its operation
    ends (``call``: its place among this state's calls, every rank's alike; ``bucket``;
    ``called`` and ``done``: ``time.perf_counter()`` at the hook and at the end;
    ``algorithm``, ``straggler``; ``error``), in the order the operations ended: for
    measurements and tests."""

    def __init__(self, comm, **allreduce_kwargs):
        unknown = sorted(set(allreduce_kwargs) - set(_KWARGS))
        if unknown:
            raise TypeError(f"stragglar_mpi.torch: unknown Iallreduce argument(s) {unknown}; "
                            f"known: {list(_KWARGS)}")
        self.comm = comm.Dup()
        self.size = self.comm.Get_size()
        self.kwargs = allreduce_kwargs
        self.trace = None
        self.calls = 0           # buckets given to the hook


def register(ddp_model, comm=None, **allreduce_kwargs) -> HookState:
    """Make ``ddp_model`` (a ``DistributedDataParallel``) average its gradient buckets with
    StragglAR over ``comm`` (default ``MPI.COMM_WORLD``), whose ranks must be those of the
    model's process group in the same order (``check_world``).  Collective over ``comm``;
    call it on every rank before the first backward pass.  Returns the hook's state."""
    comm = MPI.COMM_WORLD if comm is None else comm
    check_world(comm, ddp_model.process_group)
    state = HookState(comm, **allreduce_kwargs)
    ddp_model.register_comm_hook(state, hook)
    return state


def hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP comm hook: the average of ``bucket.buffer()`` over the ranks, nonblocking."""
    buf = bucket.buffer()
    future = torch.futures.Future()
    t_called, call = time.perf_counter(), state.calls
    state.calls += 1
    try:
        work = _working_copy(buf)
        work.div_(state.size)                     # as DDP's default hook: sum of g / n
        request = Iallreduce(state.comm, MPI.IN_PLACE, _mpi_buffer(work), MPI.SUM, **state.kwargs)
    except Exception as exc:                      # an unusable communicator, a bad argument
        _trace(state, call, bucket, t_called, None, exc)
        future.set_exception(exc)
        return future.then(_value)

    def done(error, record):                      # on the progress thread
        _trace(state, call, bucket, t_called, record, error)
        if error is not None:
            future.set_exception(error)
            return
        if work is not buf:
            buf.copy_(work)
        future.set_result(buf)

    request.on_done(done)
    request.Free()                                # the error reaches the future, not a Wait
    return future.then(_value)


def _value(future):
    # A Python Future's exception is only a value to C++ (DDP's reducer would try to cast it
    # to a tensor); a callback that raises it marks the chained future failed for C++ too.
    return future.value()


def _working_copy(buf):
    if buf.dtype in _DIRECT:
        return buf
    if buf.dtype in _WIDENED:
        return buf.to(torch.float32)
    raise TypeError(f"stragglar_mpi.torch: a gradient bucket of {buf.dtype}; the hook reduces "
                    "float32 and float64 (float16 and bfloat16 through a float32 copy)")


def _mpi_buffer(work):
    """A zero-copy view MPI can take: numpy for CPU, the tensor itself (its
    ``__cuda_array_interface__``) for CUDA, once the kernels that wrote it have run."""
    if work.is_cuda:
        torch.cuda.current_stream(work.device).synchronize()
        return work
    return work.numpy()


def _trace(state, call, bucket, t_called, record, error):
    if state.trace is None:
        return
    state.trace.append({"call": call, "bucket": bucket.index(), "called": t_called, "done": time.perf_counter(),
                        "algorithm": record.algorithm if record else None,
                        "straggler": record.straggler if record else None,
                        "error": None if error is None else f"{type(error).__name__}: {error}"})


def init_process_group_from_mpi(comm=None, backend="gloo", **kwargs):
    """``torch.distributed.init_process_group`` with rank and size from ``comm`` (default
    ``MPI.COMM_WORLD``) and a TCP rendezvous at rank 0: its host (``MASTER_ADDR`` if set)
    and a free port (``MASTER_PORT`` if set), broadcast over MPI.  Collective over ``comm``;
    for jobs started by ``mpiexec`` or ``srun``.  ``kwargs`` go to ``init_process_group``."""
    comm = MPI.COMM_WORLD if comm is None else comm
    where = None
    if comm.Get_rank() == 0:
        where = (os.environ.get("MASTER_ADDR") or socket.gethostname(),
                 int(os.environ.get("MASTER_PORT") or _free_port()))
    host, port = comm.bcast(where, root=0)
    dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=comm.Get_rank(),
                            world_size=comm.Get_size(), **kwargs)
    check_world(comm)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def check_world(comm, group=None):
    """Raise, on every rank of ``comm``, unless its ranks are the process group's in the same
    order (a ``torchrun`` launch without ``mpiexec`` gives every process an MPI world of
    one).  Collective over ``comm``."""
    if not dist.is_initialized():
        raise RuntimeError("stragglar_mpi.torch: torch.distributed has no process group: call "
                           "stragglar_mpi.torch.init_process_group_from_mpi() first")
    mine = (dist.get_rank(group), dist.get_world_size(group))
    seen = comm.allgather(mine)
    wrong = [(r, got) for r, got in enumerate(seen) if got != (r, comm.Get_size())]
    if wrong:
        rank, (pg_rank, pg_size) = wrong[0]
        raise RuntimeError(
            f"stragglar_mpi.torch: MPI's world does not match the process group's: MPI rank "
            f"{rank} of {comm.Get_size()} is rank {pg_rank} of {pg_size} in the process group"
            f"{f' ({len(wrong)} ranks differ)' if len(wrong) > 1 else ''}. Start the job with "
            "mpiexec or srun and call stragglar_mpi.torch.init_process_group_from_mpi() (a "
            "torchrun launch gives each process an MPI world of its own)")
