"""Per-layer gradient buckets: each bucket's AllReduce starts as soon as its gradient exists.

    mpiexec -n 4 python examples/overlap_buckets.py                # 4 layers, rank 3 slow
    mpiexec -n 4 python examples/overlap_buckets.py --help

A deep MLP (NumPy only) trains on a generated 10-class problem, data-parallel.  The
backward pass runs from the last layer to the first; as soon as a layer's gradient
is written into its bucket (a slice of one flat float32 buffer), that bucket's
AllReduce starts, and the backward pass goes on with the layers below.  After the
first layer, the step waits for every bucket and takes an SGD step.  One rank is slow
every step (it runs its forward pass ``--slow-factor`` more times, and sleeps
``--slow-ms``, a delay that leaves the CPU to the others, as a slow GPU would).

The same training runs three times from the same seed, a step of each in turn after a
Barrier (the same machine load for all):

- ``one Allreduce at the end``: ``stragglar_mpi.Allreduce`` of the whole flat buffer
  after the backward pass (no overlap);
- ``stragglar_mpi Allreduce_init``: one persistent request per bucket, made once,
  started each step as the bucket is ready (StragglAR, the slow rank as straggler);
- ``native Iallreduce``: mpi4py's own ``comm.Iallreduce`` per bucket.

It prints the median step time and the early ranks' time in the final wait, what the
stragglar_mpi runs ran in their last step and why (``stats(comm)["last"]["why"]``), and
fails unless the three runs end with the same weights (up to float32 rounding).
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")     # MPI ranks already share the cores

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import stragglar_mpi  # noqa: E402

FEATURES, CLASSES = 256, 10


def parse_args(size):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="training steps of each run")
    p.add_argument("--hidden", type=int, default=1024, help="units of every hidden layer")
    p.add_argument("--layers", type=int, default=4, help="hidden layers (one bucket per layer)")
    p.add_argument("--batch", type=int, default=128, help="minibatch size per rank")
    p.add_argument("--slow-rank", type=int, default=-1, help="the slow rank (-1: the last)")
    p.add_argument("--slow-factor", type=int, default=6, help="extra forward passes of the slow rank")
    p.add_argument("--slow-ms", type=float, default=0.0,
                   help="the slow rank also sleeps this long each step (a delay that leaves the "
                        "CPU free, as a slow GPU would)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps < 1 or args.hidden < 1 or args.layers < 1 or args.batch < 1 or args.slow_factor < 0 \
            or not args.slow_ms >= 0:
        p.error("--steps, --hidden, --layers, --batch must be positive, --slow-factor and --slow-ms >= 0")
    if not -1 <= args.slow_rank < size:
        p.error(f"--slow-rank {args.slow_rank} is not a rank of {size}")
    args.slow_rank %= size
    return args


class MLP:
    """ReLU layers whose weights and gradients are slices of two flat float32 buffers."""

    def __init__(self, widths, seed):
        rng = np.random.default_rng(seed)
        shapes = list(zip(widths[:-1], widths[1:]))
        sizes = [i * o + o for i, o in shapes]
        self.flat = np.zeros(sum(sizes), np.float32)
        self.grad = np.zeros_like(self.flat)
        cuts = np.cumsum([0] + sizes)
        self.buckets = [self.grad[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
        self.params = [self._split(self.flat[a:b], s) for (a, b), s in zip(zip(cuts[:-1], cuts[1:]), shapes)]
        self.grads = [self._split(g, s) for g, s in zip(self.buckets, shapes)]
        for w, _ in self.params:
            w[:] = rng.standard_normal(w.shape) * np.sqrt(2.0 / w.shape[0])

    @staticmethod
    def _split(flat, shape):
        i, o = shape
        return flat[:i * o].reshape(i, o), flat[i * o:]

    def forward(self, x):
        acts = [x]
        for k, (w, b) in enumerate(self.params):
            z = acts[-1] @ w + b
            acts.append(np.maximum(z, 0) if k < len(self.params) - 1 else z)
        return acts

    def backward(self, acts, y, ready):
        """Gradients of the mean cross-entropy, last layer first; ``ready(k)`` once bucket k is written."""
        logits = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
        delta = p
        delta[np.arange(len(y)), y] -= 1
        delta /= len(y)
        for k in reversed(range(len(self.params))):
            gw, gb = self.grads[k]
            np.matmul(acts[k].T, delta, out=gw)
            gb[:] = delta.sum(axis=0)
            ready(k)
            if k:
                delta = (delta @ self.params[k][0].T) * (acts[k] > 0)
        return loss


class Run:
    """One training run; ``start(k)`` starts bucket k's AllReduce, ``finish()`` completes all."""

    def __init__(self, name, comm, args, widths):
        self.name, self.comm, self.args = name, comm, args
        self.model = MLP(widths, args.seed)
        self.velocity = np.zeros_like(self.model.flat)
        self.rng = np.random.default_rng([args.seed, comm.Get_rank()])
        self.step_times, self.wait_times, self.losses = [], [], []
        self.pending = []
        self.why = "mpi4py's own Iallreduce"
        buckets, slow = self.model.buckets, args.slow_rank
        if name == "stragglar_mpi Allreduce_init":      # made once, started every step
            self.persistent = [stragglar_mpi.Allreduce_init(comm, MPI.IN_PLACE, b, straggler=slow,
                                                            algorithm="stragglar") for b in buckets]

    def start(self, k):
        if self.name == "stragglar_mpi Allreduce_init":
            self.persistent[k].Start()
            self.pending.append(self.persistent[k])
        elif self.name == "native Iallreduce":
            self.pending.append(MPI.Intracomm.Iallreduce(self.comm, MPI.IN_PLACE, self.model.buckets[k]))

    def finish(self):
        if self.name == "one Allreduce at the end":
            stragglar_mpi.Allreduce(self.comm, MPI.IN_PLACE, self.model.grad,
                                    straggler=self.args.slow_rank, algorithm="stragglar")
        else:
            MPI.Request.Waitall(self.pending)
            self.pending = []
        if self.name != "native Iallreduce":        # what the last call ran, and why
            self.why = stragglar_mpi.stats(self.comm)["last"]["why"]

    def step(self, x, y, slow):
        t0 = time.perf_counter()
        batch = self.rng.integers(0, len(y), self.args.batch)
        acts = self.model.forward(x[batch])
        for _ in range(self.args.slow_factor if slow else 0):
            self.model.forward(x[batch])          # the slow rank's extra, real work
        if slow and self.args.slow_ms:
            time.sleep(self.args.slow_ms / 1e3)
        loss = self.model.backward(acts, y[batch], self.start)
        t_wait = time.perf_counter()
        self.finish()
        t_end = time.perf_counter()
        self.velocity = 0.9 * self.velocity + self.model.grad / self.comm.Get_size()
        self.model.flat -= 0.02 * self.velocity
        self.step_times.append(t_end - t0)
        self.wait_times.append(t_end - t_wait)
        self.losses.append(loss)


def dataset(seed, samples):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, samples)
    return (centers[y] + rng.standard_normal((samples, FEATURES)).astype(np.float32)), y


def report(comm, runs, args, nbytes):
    rank, slow = comm.Get_rank(), args.slow_rank
    rows = []
    for run in runs:
        steps = np.array(run.step_times[1:] or run.step_times)
        comm.Allreduce(MPI.IN_PLACE, steps, op=MPI.MAX)      # each step: its slowest rank
        early = run.wait_times[1:] or run.wait_times
        wait = comm.allreduce(statistics.median(early) if rank != slow else 0.0, op=MPI.MAX)
        rows.append((run.name, statistics.median(steps) * 1e3, wait * 1e3))
    weights = [comm.bcast(run.model.flat, root=0) for run in runs]
    worst = max(float(np.max(np.abs(w - weights[0]))) for w in weights)
    same = worst <= 1e-3 * float(np.max(np.abs(weights[0])))
    if rank == 0:
        print(f"{comm.Get_size()} ranks, {args.layers + 1} buckets, {nbytes / 2**20:.2f} MiB of float32 "
              f"gradients, {args.steps} steps, slow rank {slow} (+{args.slow_factor} forward passes, "
              f"+{args.slow_ms:g} ms asleep)")
        print(f"{'method':32} {'median step ms':>15} {'final wait ms (early ranks)':>28}")
        for name, step, wait in rows:
            print(f"{name:32} {step:15.2f} {wait:28.2f}")
        print(f"same weights: max |difference| {worst:.2e} ({'ok' if same else 'FAILED'}); "
              f"loss {runs[0].losses[0]:.4f} -> {runs[0].losses[-1]:.4f}")
        for run in runs:
            print(f"{run.name} ran, in its last step: {run.why}")
    return same


def main():
    comm = MPI.COMM_WORLD
    args = parse_args(comm.Get_size())
    widths = [FEATURES] + [args.hidden] * args.layers + [CLASSES]
    x, y = dataset(args.seed, 1024 * (comm.Get_size() + 1))
    names = ["one Allreduce at the end", "stragglar_mpi Allreduce_init", "native Iallreduce"]
    runs = [Run(name, comm, args, widths) for name in names]
    for _ in range(args.steps):
        for run in runs:
            comm.Barrier()
            run.step(x, y, comm.Get_rank() == args.slow_rank)
    ok = report(comm, runs, args, runs[0].model.grad.nbytes)
    for request in getattr(runs[1], "persistent", []):
        request.Free()
    return 0 if comm.allreduce(ok, op=MPI.LAND) else 1


if __name__ == "__main__":
    sys.exit(main())
