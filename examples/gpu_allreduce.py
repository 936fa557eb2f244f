"""Average gradients that live on the GPU (Numba device arrays) with stragglar_mpi.

    mpiexec -n 8 python examples/gpu_allreduce.py                  # one rank per GPU, CUDA-aware MPI
    NUMBA_ENABLE_CUDASIM=1 mpiexec -n 4 python examples/gpu_allreduce.py --count 4096   # no GPU: simulator

Each rank picks a GPU by its rank on the node, fills a device buffer with a
kernel, and the ranks average it with ``stragglar_mpi.Allreduce``; the buffers
stay on the device (no copy to the host in this program).  The last rank is
made late by ``--delay-ms`` each iteration.  The result is checked on the host.
"""
import argparse
import math
import time

import numpy as np
from mpi4py import MPI  # first: it initialises MPI before Numba touches the GPU

from numba import cuda

import stragglar_mpi

THREADS = 128


@cuda.jit
def fill(out, value):
    """out[i] = value + (i % 7): integer-valued floats, so the sum is exact in any reduction order."""
    start = cuda.grid(1)
    for i in range(start, out.size, cuda.gridsize(1)):
        out[i] = value + (i % 7)


@cuda.jit
def scale(buf, factor):
    start = cuda.grid(1)
    for i in range(start, buf.size, cuda.gridsize(1)):
        buf[i] *= factor


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--count", type=int, default=16 * 2**20, help="float32 elements per buffer")
    p.add_argument("--iters", type=int, default=10, help="Allreduce calls")
    p.add_argument("--delay-ms", type=float, default=5.0, help="how late the last rank arrives")
    p.add_argument("--algorithm", default="stragglar",
                   choices=["stragglar", "ring", "rhd", "direct", "native", "auto"])
    args = p.parse_args()
    if args.count < 1 or args.iters < 1 or not args.delay_ms >= 0:
        p.error("--count and --iters must be at least 1, --delay-ms at least 0")
    return args


def select_gpu(comm):
    """One GPU per rank on each node (with one visible GPU per rank, that GPU)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank = node.Get_rank()
    node.Free()
    cuda.select_device(local_rank % len(cuda.gpus))
    return local_rank


def launch(kernel, buf, *args):
    blocks = min(math.ceil(buf.size / THREADS), 1024)
    kernel[blocks, THREADS](buf, *args)


def main():
    args = parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    local_rank = select_gpu(comm)
    grad = cuda.device_array(args.count, dtype=np.float32)
    avg = cuda.device_array_like(grad)
    times = []
    for _ in range(args.iters):
        launch(fill, grad, np.float32(rank + 1))
        cuda.synchronize()          # MPI reads the buffer: the kernel must be done
        comm.Barrier()
        if rank == size - 1:
            time.sleep(args.delay_ms / 1e3)
        t0 = MPI.Wtime()
        stragglar_mpi.Allreduce(comm, grad, avg, MPI.SUM, straggler=size - 1, algorithm=args.algorithm)
        times.append(MPI.Wtime() - t0)
        launch(scale, avg, np.float32(1 / size))
    cuda.synchronize()

    expected = (size + 1) / 2 + (np.arange(args.count) % 7)
    wrong = int(np.count_nonzero(~np.isclose(avg.copy_to_host(), expected, rtol=1e-6, atol=0)))
    wrong = comm.allreduce(wrong)
    last = comm.gather(float(np.median(times)), root=0)
    if rank == 0:
        info = stragglar_mpi.stats(comm)["last"]
        print(f"{size} ranks, {args.count * 4 / 2**10:.0f} KiB float32 on GPU "
              f"(rank 0 on local device {local_rank}), algorithm {info['algorithm']}")
        print(f"median Allreduce time on the late rank {size - 1}: {last[-1] * 1e3:.2f} ms")
        print("result correct" if wrong == 0 else f"FAILED: {wrong} wrong elements")
        print(f"last call: {info['why']}")
    if wrong:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
