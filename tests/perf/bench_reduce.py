"""Which local reduction is fastest for received chunks on host buffers?

    python tests/perf/bench_reduce.py

Compares, for b = a (op) b: MPI.Op.Reduce_local (MPICH's loops), a NumPy ufunc
with out=, and the compiled transport's typed loops (cython_src/run/_interpreter.pyx, the
path the executor takes for float32/64 and int32/64 with SUM, PROD, MAX, MIN).
Prints GB/s counting 2 reads + 1 write per element; best of several runs.
"""
import time

import numpy as np
from mpi4py import MPI

from stragglar_mpi.run import _interpreter


def best(fn, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    print(f"{'bytes':>10} {'dtype':>5} {'op':>4} {'Reduce_local':>13} {'numpy':>7} {'typed loop':>11}   (GB/s)")
    for nbytes in (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20):
        for code, dt, opname, ufunc in (("f", MPI.FLOAT, "SUM", np.add), ("d", MPI.DOUBLE, "SUM", np.add),
                                        ("i", MPI.INT, "SUM", np.add), ("f", MPI.FLOAT, "MAX", np.maximum)):
            op = getattr(MPI, opname)
            a = np.ones(nbytes // np.dtype(code).itemsize, code)
            b = np.ones_like(a)
            loop = _interpreter.loop_id(dt, op)
            reps = max(3, min(200, (256 << 20) // nbytes))
            t_mpi = best(lambda: op.Reduce_local([a, dt], [b, dt]), reps)
            t_np = best(lambda: ufunc(a, b, out=b), reps)
            t_cy = best(lambda: _interpreter.reduce_local(a, b, dt, op, loop), reps)
            moved = 3 * nbytes / 1e9
            print(f"{nbytes:>10} {code:>5} {opname:>4} {moved / t_mpi:>13.1f} {moved / t_np:>7.1f} {moved / t_cy:>11.1f}")


if __name__ == "__main__":
    main()
