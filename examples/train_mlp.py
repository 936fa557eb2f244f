"""Data-parallel training with one persistently slow rank: comm.Allreduce vs stragglar_mpi.

    mpiexec -n 4 python examples/train_mlp.py                  # defaults: 2.1 MiB of gradients
    mpiexec -n 4 python examples/train_mlp.py --help

A two-layer MLP (NumPy only) learns a generated 10-class problem.  Every rank
holds its own shard of the data; each step it computes the gradient of its
minibatch and the ranks average the gradients with one Allreduce on a single
flat float32 buffer.  The slow rank does real extra work each step: it runs its
forward pass ``--slow-factor`` more times (as a slower GPU or a bigger shard
would), so it is the last to reach the Allreduce, step after step.

The same training runs twice from the same seed: once with ``comm.Allreduce``
(the MPI library's own) and once with ``stragglar_mpi.Allreduce``, told which
rank is slow.  The two runs take their steps in turn (a step of one, a step of
the other, each after a Barrier), so both see the same machine load.  The
program prints per-step loss and time of both, what stragglar_mpi ran in each step
and why (``stats(comm)["last"]["why"]``: with ``--algorithm auto``, the MPI's own
AllReduce below 4 MiB, measuring runs first above), and fails unless both reach the
same loss.
"""
import os

# One BLAS thread per rank: MPI ranks already share the cores.  Set before NumPy loads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import stragglar_mpi  # noqa: E402

FEATURES, CLASSES = 256, 10


def at_least(low):
    def parse(text):
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


def parse_args(size):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=at_least(1), default=30, help="training steps of each run")
    p.add_argument("--hidden", type=at_least(1), default=2048,
                   help="hidden units; gradients are about hidden*267*4 bytes")
    p.add_argument("--batch", type=at_least(1), default=128, help="minibatch size per rank")
    p.add_argument("--lr", type=float, default=None,
                   help="SGD learning rate, momentum 0.9 (default: %(default)s, meaning min(0.04, 40/hidden), "
                        "which is stable at any width)")
    p.add_argument("--slow-rank", type=int, default=-1, help="the persistently slow rank (-1: the last)")
    p.add_argument("--slow-factor", type=at_least(0), default=8,
                   help="extra forward passes the slow rank computes each step (0: no straggler)")
    p.add_argument("--algorithm", default="stragglar",
                   choices=["stragglar", "ring", "rhd", "direct", "native", "auto"],
                   help="stragglar_mpi algorithm for the second run")
    p.add_argument("--seed", type=int, default=0, help="seed for data and initial weights")
    p.add_argument("--quiet", action="store_true", help="print only the summary table")
    args = p.parse_args()
    if not -1 <= args.slow_rank < size:
        p.error(f"--slow-rank {args.slow_rank} is not a rank of {size} (0..{size - 1}, or -1: the last)")
    if args.lr is not None and not args.lr > 0:
        p.error(f"--lr must be positive, got {args.lr}")
    return args


# ---- data: a generated classification problem, the same on every rank ----

def make_dataset(seed, samples):
    """Gaussian clusters in FEATURES dimensions, three clusters per class: not linearly separable."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((3 * CLASSES, FEATURES)).astype(np.float32) * (6 / np.sqrt(FEATURES))
    cluster = rng.integers(0, len(centers), samples)
    x = centers[cluster] + rng.standard_normal((samples, FEATURES)).astype(np.float32)
    return x, cluster % CLASSES


# ---- model: all parameters are views into one flat buffer, and so are the gradients ----

class MLP:
    def __init__(self, hidden, seed):
        self.shapes = [(FEATURES, hidden), (hidden,), (hidden, CLASSES), (CLASSES,)]
        size = sum(int(np.prod(s)) for s in self.shapes)
        self.flat = np.zeros(size, dtype=np.float32)
        # The gradient buffer carries the loss in its last slot, so one Allreduce averages both.
        self.grad_flat = np.zeros(size + 1, dtype=np.float32)
        self.params = self._views(self.flat)
        self.grads = self._views(self.grad_flat)
        rng = np.random.default_rng(seed + 1)
        w1, _, w2, _ = self.params
        w1[:] = rng.standard_normal(w1.shape) * np.sqrt(2 / FEATURES)
        w2[:] = rng.standard_normal(w2.shape) * np.sqrt(1 / hidden)

    def _views(self, flat):
        views, offset = [], 0
        for shape in self.shapes:
            n = int(np.prod(shape))
            views.append(flat[offset:offset + n].reshape(shape))
            offset += n
        return views

    def forward(self, x):
        w1, b1, w2, b2 = self.params
        h = np.maximum(x @ w1 + b1, 0)
        return h, h @ w2 + b2

    def loss_and_grad(self, x, y):
        """Mean cross-entropy of the minibatch; gradients written into ``grad_flat``."""
        h, logits = self.forward(x)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.mean(np.log(p[np.arange(len(y)), y] + 1e-12))
        d_logits = p
        d_logits[np.arange(len(y)), y] -= 1
        d_logits /= len(y)
        gw1, gb1, gw2, gb2 = self.grads
        np.matmul(h.T, d_logits, out=gw2)
        gb2[:] = d_logits.sum(axis=0)
        d_h = d_logits @ self.params[2].T
        d_h[h <= 0] = 0
        np.matmul(x.T, d_h, out=gw1)
        gb1[:] = d_h.sum(axis=0)
        self.grad_flat[-1] = loss
        return loss

    def accuracy(self, x, y):
        return float(np.mean(np.argmax(self.forward(x)[1], axis=1) == y))


# ---- two training runs, stepped in turn ----

class Run:
    """One training run: its model, optimiser state, minibatch stream and history."""

    def __init__(self, name, allreduce, args, rank):
        self.name, self.allreduce = name, allreduce
        self.model = MLP(args.hidden, args.seed)
        self.velocity = np.zeros_like(self.model.flat)
        self.rng = np.random.default_rng([args.seed, rank])   # the same minibatches in both runs
        self.losses, self.step_times, self.allreduce_times = [], [], []
        self.accuracy = None

    def step(self, x, y, args, slow, size):
        batch = self.rng.integers(0, len(y), args.batch)
        t0 = MPI.Wtime()
        self.model.loss_and_grad(x[batch], y[batch])
        if slow:
            for _ in range(args.slow_factor):   # the straggler's extra, real work
                self.model.forward(x[batch])
        t1 = MPI.Wtime()
        self.allreduce(self.model.grad_flat)
        t2 = MPI.Wtime()
        grad = self.model.grad_flat
        grad /= size
        self.velocity *= 0.9
        self.velocity += grad[:-1]
        self.model.flat -= args.lr * self.velocity
        self.losses.append(float(grad[-1]))
        self.step_times.append(t2 - t0)
        self.allreduce_times.append(t2 - t1)


def train(comm, runs, args, x, y):
    rank = comm.Get_rank()
    for _ in range(args.steps):
        for run in runs:
            comm.Barrier()          # every step of every run starts from the same instant
            run.step(x, y, args, rank == args.slow_rank, comm.Get_size())


def timings(comm, run, slow_rank):
    """Per step: the step time of the slowest rank, and the slow rank's time inside Allreduce."""
    step = np.array(run.step_times)
    comm.Allreduce(MPI.IN_PLACE, step, MPI.MAX)
    return step, np.array(comm.bcast(run.allreduce_times, root=slow_rank))


def native(comm):
    def allreduce(buf):
        comm.Allreduce(MPI.IN_PLACE, buf, MPI.SUM)
    return allreduce


def with_stragglar(comm, args, whys):
    """The second run's AllReduce; ``whys`` gets what each call ran and why."""
    def allreduce(buf):
        stragglar_mpi.Allreduce(comm, MPI.IN_PLACE, buf, MPI.SUM,
                                straggler=args.slow_rank, algorithm=args.algorithm)
        whys.append(stragglar_mpi.stats(comm)["last"]["why"])
    return allreduce


# ---- output (rank 0) ----

def per_step(runs, times, whys):
    (a, b), ((sa, _), (sb, _)) = runs, times
    print(f"{'':>5} {'loss':^33} {'step ms (slowest rank)':^33}")
    print(f"{'step':>5} {'comm.Allreduce':>16} {'stragglar_mpi':>16} {'comm.Allreduce':>16} "
          f"{'stragglar_mpi':>16}  stragglar_mpi ran (why)")
    for i in range(len(a.losses)):
        print(f"{i:>5} {a.losses[i]:>16.5f} {b.losses[i]:>16.5f} {sa[i] * 1e3:>16.2f} "
              f"{sb[i] * 1e3:>16.2f}  {whys[i]}")


def summary(comm, args, runs, times, grad_bytes, whys):
    skip = 1 if args.steps > 1 else 0                    # step 0 also builds the plans
    median = [(np.median(s[skip:]), np.median(ar[skip:])) for s, ar in times]
    print(f"\n{comm.Get_size()} ranks, {grad_bytes / 2**20:.2f} MiB of float32 gradients, "
          f"{args.steps} steps, slow rank {args.slow_rank} (+{args.slow_factor} forward passes)")
    print(f"{'method':<28} {'median step ms':>15} {'Allreduce ms (slow rank)':>25} "
          f"{'final loss':>11} {'test acc':>9}")
    for run, (step, ar) in zip(runs, median):
        print(f"{run.name:<28} {step * 1e3:>15.2f} {ar * 1e3:>25.2f} "
              f"{run.losses[-1]:>11.5f} {run.accuracy:>9.3f}")
    (sa, ara), (sb, arb) = median
    print(f"speedup of {runs[1].name} over {runs[0].name}: {sa / sb:.2f}x per step, "
          f"{ara / arb:.2f}x in the slow rank's Allreduce")
    gap = max(abs(p - q) for p, q in zip(runs[0].losses, runs[1].losses))
    print(f"same loss: max |loss difference| over all steps = {gap:.2e} "
          f"(first loss {runs[0].losses[0]:.5f})")
    print(f"stragglar_mpi ran {dict(stragglar_mpi.stats(comm)['calls'])}; "
          f"the last step: {whys[-1]}")


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    args = parse_args(size)
    args.slow_rank %= size
    args.lr = args.lr or min(0.04, 40 / args.hidden)
    x, y = make_dataset(args.seed, 2048 * (size + 1))
    test, shard = (x[:2048], y[:2048]), (x[2048 + rank::size], y[2048 + rank::size])
    whys = []
    runs = [Run("comm.Allreduce", native(comm), args, rank),
            Run(f"stragglar_mpi ({args.algorithm})", with_stragglar(comm, args, whys), args, rank)]
    train(comm, runs, args, *shard)
    times = [timings(comm, run, args.slow_rank) for run in runs]
    for run in runs:
        run.accuracy = run.model.accuracy(*test)
    if rank == 0:
        if not args.quiet:
            per_step(runs, times, whys)
        summary(comm, args, runs, times, runs[0].model.grad_flat.nbytes, whys)
    # Reductions in a different order change float32 sums in the last bits; nothing more.
    if not np.allclose(runs[0].losses, runs[1].losses, rtol=1e-3, atol=1e-4):
        sys.exit("FAILED: the two runs did not reach the same loss")


if __name__ == "__main__":
    main()
