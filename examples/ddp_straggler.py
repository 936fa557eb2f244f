"""PyTorch DDP with a persistently slow rank: DDP's own allreduce against the StragglAR hook.

    mpiexec -n 4 python examples/ddp_straggler.py                       # StragglAR hook
    mpiexec -n 4 python examples/ddp_straggler.py --hook default        # DDP's gloo allreduce
    mpiexec -n 4 python examples/ddp_straggler.py --bench               # all three, with and without a slow rank

The slow rank sleeps ``--delay`` seconds in every forward pass, so each of its gradient
buckets comes late.  Per step the script measures the step time and the *tail*: from the
slow rank's last bucket (the last hook call of the step on any rank) to the end of the
step's communication (the last bucket's end on any rank), on one machine's clock.  Hooks:
``stragglar`` (stragglar_mpi.torch.register, straggler by arrival), ``auto`` (register
with the library's defaults), ``native`` (the hook forced to the MPI's own AllReduce) and ``default`` (DDP's allreduce_hook over gloo,
the same as no hook, timed).  For the library's hooks it also prints what the last
bucket's AllReduce ran and why (``stragglar_mpi.stats(state.comm)["last"]["why"]``).
Needs the ``torch`` extra.
"""
import argparse
import statistics
import time

from mpi4py import MPI  # noqa: F401  (first: it initialises MPI)

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import stragglar_mpi.torch as smpi_torch
from stragglar_mpi import stats

HOOKS = ("stragglar", "auto", "native", "default")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hook", choices=HOOKS, default="stragglar")
    p.add_argument("--slow-rank", type=int, default=None, help="the slow rank (default: the last; -1: none)")
    p.add_argument("--delay", type=float, default=0.05, help="seconds the slow rank sleeps per forward (default 0.05)")
    p.add_argument("--steps", type=int, default=20, help="steps timed (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="steps before timing (default 5)")
    p.add_argument("--width", type=int, default=1024, help="hidden width of the MLP (default 1024)")
    p.add_argument("--layers", type=int, default=4, help="hidden layers (default 4)")
    p.add_argument("--bucket-mb", type=float, default=4.0, help="DDP's bucket_cap_mb (default 4)")
    p.add_argument("--bench", action="store_true", help="every hook, with and without the slow rank")
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.delay < 0:
        p.error("--steps must be at least 1, --warmup and --delay at least 0")
    return args


class MLP(nn.Module):
    def __init__(self, width, layers, slow, delay):
        super().__init__()
        sizes = [64] + [width] * layers + [10]
        self.net = nn.Sequential(*[m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())][:-1])
        self.slow, self.delay = slow, delay

    def forward(self, x):
        if dist.get_rank() == self.slow:
            time.sleep(self.delay)          # the persistent straggler
        return self.net(x)


def timed_default_hook(trace):
    """DDP's allreduce_hook (what DDP does without a hook) with the times of each bucket."""
    def hook(process_group, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        called = time.perf_counter()

        def ended(fut):
            trace.append({"called": called, "done": time.perf_counter()})
            return fut.value()
        return allreduce_hook(process_group, bucket).then(ended)
    return hook


def build(args, hook, slow):
    """(the DDP model, its trace of buckets, the hook's communicator or None)."""
    torch.manual_seed(0)
    ddp = DDP(MLP(args.width, args.layers, slow, args.delay), bucket_cap_mb=args.bucket_mb)
    if hook == "default":
        trace = []
        ddp.register_comm_hook(None, timed_default_hook(trace))
        return ddp, trace, None
    how = {"stragglar": dict(algorithm="stragglar", straggler="arrival"), "auto": {},
           "native": dict(algorithm="native")}[hook]
    state = smpi_torch.register(ddp, **how)      # "auto": the one line, library defaults
    state.trace = trace = []
    return ddp, trace, state.comm


def run(args, hook, slow):
    """Median step and tail (ms) over the timed steps, the final weights, the buckets per
    step and what the last bucket ran and why."""
    world = MPI.COMM_WORLD
    ddp, trace, comm = build(args, hook, slow)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    steps, tails = [], []
    for step in range(args.warmup + args.steps):
        g = torch.Generator().manual_seed(100 * dist.get_rank() + step)
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
        world.Barrier()
        first, t0 = len(trace), time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        t1 = time.perf_counter()
        mine = trace[first:]
        times = world.allgather((t1 - t0, max(t["called"] for t in mine), max(t["done"] for t in mine)))
        if step >= args.warmup:
            steps.append(max(t[0] for t in times))
            tails.append(max(t[2] for t in times) - max(t[1] for t in times))
    weights = torch.cat([p.detach().flatten() for p in ddp.parameters()])
    buckets = len(trace) // (args.warmup + args.steps)
    why = "DDP's own allreduce_hook (gloo)" if comm is None else stats(comm)["last"]["why"]
    return 1e3 * statistics.median(steps), 1e3 * statistics.median(tails), weights, buckets, why


def main():
    args = parse_args()
    smpi_torch.init_process_group_from_mpi()
    torch.set_num_threads(1)                 # one core per rank: the ranks share the machine
    world = MPI.COMM_WORLD
    n, rank = world.Get_size(), world.Get_rank()
    slow = n - 1 if args.slow_rank is None else args.slow_rank
    slow = None if slow < 0 else slow
    cases = [(h, s) for s in ([None, slow] if slow is not None else [None]) for h in HOOKS] \
        if args.bench else [(args.hook, slow)]
    results = {case: run(args, *case) for case in cases}
    if rank == 0:
        params = sum(p.numel() for p in MLP(args.width, args.layers, None, 0).parameters())
        print(f"{n} ranks, MLP {args.layers}x{args.width} ({params * 4 / 2**20:.1f} MiB of float32 "
              f"gradients), bucket_cap_mb {args.bucket_mb:g}, {args.steps} steps timed after "
              f"{args.warmup}; slow rank sleeps {args.delay * 1e3:g} ms per forward")
        print(f"{'hook':10} {'slow rank':>9} {'buckets':>7} {'step ms':>8} {'tail ms':>8} "
              f"{'max |w - w_default|':>20}  last bucket ran (why)")
    same = True
    for (hook, slow_rank), (step_ms, tail_ms, weights, buckets, why) in results.items():
        reference = results.get(("default", slow_rank), (None, None, weights))[2]
        diff = (weights - reference).abs().max().item()
        same = same and torch.allclose(weights, reference, rtol=1e-4, atol=1e-6)
        if rank == 0:
            who = "-" if slow_rank is None else str(slow_rank)
            print(f"{hook:10} {who:>9} {buckets:>7} {step_ms:8.1f} {tail_ms:8.1f} {diff:20.2e}"
                  f"  {why}")
    if rank == 0 and args.bench:
        for s in sorted({s for _, s in cases}, key=lambda s: -1 if s is None else s):
            base = results[("default", s)]
            for hook in ("stragglar", "auto", "native"):
                r = results[(hook, s)]
                print(f"slow rank {'-' if s is None else s}: {hook} vs default: step {base[0] / r[0]:.2f}x, "
                      f"tail {base[1] / r[1]:.2f}x")
    if rank == 0 and args.bench:
        print("same weights as the default hook (allclose)" if same else "FAILED: the weights differ")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
