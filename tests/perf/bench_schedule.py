"""Schedules at scale: synthesis, one rank's plan, a new straggler, memory, rounds vs bound.

    python tests/perf/bench_schedule.py             # the figures of docs/SCHEDULES.md
    python tests/perf/bench_schedule.py --quick     # tiny sizes (CI smoke test)
    python tests/perf/bench_schedule.py --whole 1000 --rank 1000,4095 --straggler 256 \
        --checked 1000,1500,2047,3000,4095 --verify 2       # mostly the large-n figures

Peak RSS of the command line's check is measured outside, one process per n:
    /usr/bin/time -v python -m stragglar_mpi.schedule verify --n 4095 --algorithm stragglar

No MPI: everything here is what one rank computes before its first call.  Times
are CPU seconds (process_time) and wall seconds; on a shared machine only the
CPU figures are stable.  Each figure is the best of a few tries, caches cleared.
"""
import argparse
import sys
import time
import tracemalloc

from stragglar_mpi.run.plan import compile_rounds
from stragglar_mpi.schedule import field, lower_bound_rounds, rank_view, stragglar, synthesize, verify
from stragglar_mpi.schedule.stragglar import verify_canonical
from stragglar_mpi.schedule.__main__ import main as cli, parse_ns

COUNT, EXTENT = 1 << 20, 4   # 4 MiB of float32 per call: the plan's size does not depend on it


def _clear():
    import stragglar_mpi.schedule as sched
    for cached in (stragglar._canonical, stragglar._slice, field._field_tables,
                   field._field_pattern, field._powers_of_primitive,
                   stragglar._verified_whole, sched._verified_canonical, sched.build):
        cached.cache_clear()
    stragglar._STREAMED.clear()


def _timed(fn, tries):
    """(cpu, wall) seconds of the fastest of ``tries`` cold runs."""
    best = None
    for _ in range(tries):
        _clear()
        cpu, wall = time.process_time(), time.perf_counter()
        fn()
        got = (time.process_time() - cpu, time.perf_counter() - wall)
        best = got if best is None or got[0] < best[0] else best
    return best


def _plan(n, straggler, rank):
    chunks, rounds = rank_view("stragglar", n, straggler, rank)
    label = rank - (rank > straggler)
    return compile_rounds(rounds, chunks, rank, COUNT, EXTENT, False, True, frozenset([label]))


def whole(ns, tries):
    for n in ns:
        slow = n & (n - 1) != 0    # the greedy: tens of seconds at n=1000, timed once
        cpu, wall = _timed(lambda: synthesize(n), 1 if slow else tries)
        vcpu, _ = _timed(lambda: verify(synthesize(n)), 1)
        rounds = len(synthesize(n).rounds)
        print(f"whole schedule n={n}: synthesize {cpu:.3f} s cpu ({wall:.3f} s wall), "
              f"synthesize+verify {vcpu:.3f} s cpu; {rounds} rounds, bound {lower_bound_rounds(n)}")


def one_rank(ns, tries):
    for n in ns:
        field = n & (n - 1) == 0
        cpu, wall = _timed(lambda: _plan(n, n - 1, n // 3), tries if field else 1)
        how = "field form" if field else (
            "one checked pass of the NumPy greedy" if n > stragglar.AUGMENTING_MAX
            else "the verified canonical schedule")
        print(f"one rank's plan n={n} (cold, {how}): "
              f"{cpu * 1e3:.1f} ms cpu ({wall * 1e3:.1f} ms wall)")


def checked(ns):
    """What `python -m stragglar_mpi.schedule verify --n N` does: synthesize and check
    the canonical schedule round by round (NumPy columns).  No tracemalloc here (it
    slows the greedy's Python several times); peak RSS: /usr/bin/time, see above."""
    for n in ns:
        _clear()
        cpu, wall = time.process_time(), time.perf_counter()
        rounds = verify_canonical(n)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"checked n={n}: {rounds} rounds, bound {lower_bound_rounds(n)} "
              f"(+{rounds - lower_bound_rounds(n)}); {cpu:.2f} s cpu ({wall:.2f} s wall)")


def new_straggler(ns, tries):
    for n in ns:
        _plan(n, n - 1, 1)                  # warm: the canonical schedule is known
        times = []
        for straggler in range(2, 2 + 5 * tries):
            cpu, wall = time.process_time(), time.perf_counter()
            _plan(n, straggler, 1)
            times.append((time.process_time() - cpu, time.perf_counter() - wall))
        cpu = sorted(t[0] for t in times)[len(times) // 2]
        wall = sorted(t[1] for t in times)[len(times) // 2]
        print(f"new straggler n={n}: compile one rank's plan {cpu * 1e3:.2f} ms cpu median "
              f"({wall * 1e3:.2f} ms wall) over {len(times)} stragglers")


def peak_bytes(ns):
    for n in ns:
        _clear()
        tracemalloc.start()
        plan = _plan(n, n - 1, n // 3)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"peak bytes of one rank's plan n={n}: {peak:,} traced "
              f"({plan.rows.nbytes:,} in the plan itself, {plan.rows.shape[0]} rows)")


def bound(spec):
    """The command line's check, run in this process (a child started under mpiexec
    would try to join the MPI job)."""
    print("$ python -m stragglar_mpi.schedule verify --n", spec, "--algorithm stragglar", flush=True)
    return cli(["verify", "--n", spec, "--algorithm", "stragglar"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes, for the CI smoke test")
    p.add_argument("--whole", type=parse_ns, default=parse_ns("1000,1024"))
    p.add_argument("--rank", type=parse_ns, default=parse_ns("1024,4096,1000,4095"))
    p.add_argument("--straggler", type=parse_ns, default=parse_ns("256,1024"))
    p.add_argument("--checked", type=parse_ns, default=parse_ns("1000,1500,2047,3000,4095"),
                   help="n for the round-by-round check of the NumPy columns (time, memory)")
    p.add_argument("--verify", default="2..64,128,256,512,1024,2048,4096",
                   help="n for the bound check through the command line")
    p.add_argument("--tries", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.whole, args.rank, args.straggler = [24, 32], [64, 300], [16, 32]
        args.verify, args.tries, args.checked = "2..16,32", 1, [300]
    whole(args.whole, args.tries)
    one_rank(args.rank, args.tries)
    checked(args.checked)
    new_straggler(args.straggler, args.tries)
    peak_bytes(args.rank)
    return bound(args.verify)


if __name__ == "__main__":
    sys.exit(main())
