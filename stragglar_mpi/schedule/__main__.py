"""Command line: show, verify and simulate schedules.

    python -m stragglar_mpi.schedule show --n 8
    python -m stragglar_mpi.schedule show --algorithm hierarchical --n 16 --node-size 8 --json
    python -m stragglar_mpi.schedule show --algorithm hierarchical --n 16 --node-size 8 --phase 1
    python -m stragglar_mpi.schedule show --algorithm hring --n 16 --node-size 8
    python -m stragglar_mpi.schedule verify --n 2..256
    python -m stragglar_mpi.schedule simulate --n 4,8,16,32,64,128,256 \\
        --size 1G --alpha 3us --bandwidth 450GiB/s
    python -m stragglar_mpi.schedule simulate --node-size 8 --n 16,32,128,1024 --size 1G \\
        --alpha 3us --bandwidth 450GB/s --alpha-inter 5us --bandwidth-inter 50GB/s
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import ALGORITHMS, ScheduleError, build, lower_bound_rounds, simulate, verified_rounds
from .algorithms import (BY_NAME, DIRECT, HIERARCHICAL, HRING, RING, STRAGGLAR,
                         TOPOLOGY_ALGORITHMS)
from .units import parse_bandwidth, parse_size, parse_time, time_in  # noqa: F401  (the tests read them here too)

def parse_ns(text: str) -> list[int]:
    """'2..256', '4,8,16', '8' or a mix such as '2..8,16'; every n at least 2."""
    ns: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("..")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a rank count or range: {part.strip()!r} "
                                             "(examples: 8, 4,8, 2..16)") from None
        if first > last:
            raise argparse.ArgumentTypeError(f"empty range {part.strip()!r}: write LOW..HIGH")
        if first < 2:
            raise argparse.ArgumentTypeError(f"n must be at least 2, got {first}")
        ns += range(first, last + 1)
    return ns


def _algorithms(text: str) -> list[str]:
    names = list(ALGORITHMS) if text == "all" else text.split(",")
    unknown = [a for a in names if a not in ALGORITHMS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown algorithm(s) {unknown}; choose from {ALGORITHMS}")
    return names


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


LEGEND = """\
legend: Rt = round t; cK:a->b = rank a sends chunk K to rank b, which keeps it (a copy);
        cK:a=>b = rank a sends its partial of chunk K to rank b, which reduces it into its own"""


def cmd_show(args) -> int:
    for n in args.n:
        schedule = _two_tier_schedule(args, n) if args.algorithm in TOPOLOGY_ALGORITHMS else build(
            args.algorithm, n, args.straggler)
        print(schedule.to_json(indent=1) if args.json else schedule)
    if not args.json:
        print(LEGEND)
    return 0


def _layout(n: int, k: int, layout: str) -> tuple:
    if not k or n % k:
        raise SystemExit(f"--node-size must divide --n {n} for {layout} nodes, got {k}")
    m = n // k
    if layout == "cyclic":
        return tuple(tuple(range(i, n, m)) for i in range(m))
    return tuple(tuple(range(i * k, (i + 1) * k)) for i in range(m))


def _two_tier_schedule(args, n: int):
    """hierarchical (phase 2, or phase 1 with --phase 1) or hring on nodes of --node-size."""
    from .hierarchical import hierarchical, hring, phase1
    from .verify import verify
    nodes = _layout(n, args.node_size, args.layout)
    if args.algorithm == HRING:
        return verify(hring(nodes))
    straggler = n - 1 if args.straggler is None else args.straggler
    make = phase1 if args.phase == 1 else hierarchical
    return verify(make(nodes, straggler, args.pieces))


def cmd_verify(args) -> int:
    failures = 0
    for algorithm in args.algorithm:
        start = time.perf_counter()
        excess = {}
        for n in args.n:
            stragglers = range(n) if args.every_straggler and BY_NAME[algorithm].roles else [None]
            for straggler in stragglers:
                try:
                    rounds = verified_rounds(algorithm, n, straggler)
                except ScheduleError as exc:
                    failures += 1
                    print(f"FAIL {algorithm} n={n} straggler={straggler}: {exc}")
                    continue
            if algorithm == STRAGGLAR:
                excess[n] = rounds - lower_bound_rounds(n)
        elapsed = time.perf_counter() - start
        print(f"{algorithm}: verified n in {_compact(args.n)} in {elapsed:.2f} s")
        if excess:
            _print_excess(excess)
    return 1 if failures else 0


def _print_excess(excess: dict) -> None:
    missed = {n: e for n, e in excess.items() if e}
    print(f"  rounds == n-2+ceil(log2 n) for {len(excess) - len(missed)} of {len(excess)} n")
    for n, e in sorted(missed.items()):
        print(f"  n={n}: {lower_bound_rounds(n) + e} rounds, bound {lower_bound_rounds(n)} (+{e})")


def _compact(ns: list[int]) -> str:
    if ns == list(range(ns[0], ns[-1] + 1)) and len(ns) > 2:
        return f"{ns[0]}..{ns[-1]}"
    return ",".join(map(str, ns))


def cmd_simulate(args) -> int:
    if args.node_size:
        return _simulate_tiers(args)
    names = _NAMES
    cost = (args.size, args.alpha, args.bandwidth)
    print(f"size={args.size:.0f} B alpha={args.alpha:g} s bandwidth={args.bandwidth:.4g} B/s; "
          f"times in ms, speedup = ring / stragglar")
    print("\nstraggler late enough to hide phase 1 (time after it arrives):")
    _table(names, args.n, cost, lambda n: _hiding_delay(n, *cost) if args.delay is None
           else args.delay / 1e3, "post_arrival")
    print("\nno straggler (everyone arrives at 0; time to finish):")
    _table(names, args.n, cost, lambda n: 0.0, "finish")
    return 0


def _hiding_delay(n: int, size: float, alpha: float, bandwidth: float) -> float:
    """Long enough for the longest phase 1 (direct's AllReduce among n-1 ranks)."""
    m = max(n - 1, 1)
    return 2 * (m - 1) * (alpha + size / m / bandwidth)


def _table(names, ns, cost, delay_of, field) -> None:
    print(f"{'n':>5} {'delay':>9} " + " ".join(f"{a:>10}" for a in names) + f" {'speedup':>8}")
    for n in ns:
        delay = delay_of(n)
        arrivals = [0.0] * (n - 1) + [delay]
        times = {a: getattr(simulate(build(a, n), *cost, arrivals), field) for a in names}
        speedup = times[RING] / times[STRAGGLAR] if times[STRAGGLAR] else float("nan")
        print(f"{n:>5} {delay * 1e3:>9.3f} " + " ".join(f"{times[a] * 1e3:>10.4f}" for a in names)
              + f" {speedup:>8.2f}")


#: The simulate table's columns: the synchronous schedules, then the straggler-aware
#: ones, StragglAR last (the speedup is ring / stragglar).
_NAMES = tuple(sorted(ALGORITHMS, key=lambda a: (BY_NAME[a].roles, a == STRAGGLAR)))
#: Beside hierarchical across nodes: the flat schedules but direct, StragglAR first.
_FLAT_NAMES = tuple(a for a in reversed(_NAMES) if a != DIRECT)


def _simulate_tiers(args) -> int:
    """Nodes of --node-size ranks (block layout), two tiers of links; the last rank late."""
    from .simulate import Tiers
    from .tiers import costs, floor, pieces as model_pieces
    k = args.node_size
    bad = [n for n in args.n if n % k or n // k < 2]
    if bad:
        raise SystemExit(f"--n must be multiples of --node-size {k}, at least two nodes: {bad}")
    a2 = args.alpha if args.alpha_inter is None else args.alpha_inter
    b2 = args.bandwidth if args.bandwidth_inter is None else args.bandwidth_inter
    links = (args.alpha, args.bandwidth, a2, b2)
    print(f"nodes of {k} ranks; size={args.size:.0f} B; inside alpha={args.alpha:g} s "
          f"bandwidth={args.bandwidth:.4g} B/s; between alpha={a2:g} s bandwidth={b2:.4g} B/s")
    print("times in ms, simulated (a rank's link inside its node and its NIC are separate ports);"
          " hring = hierarchical ring (closed form, = its simulated schedule); floor = "
          "max(s/(b1+b2), s/(k b2)); W = pieces per slice (the model's choice)")
    rows = []
    for n in args.n:
        m = n // k
        tiers = Tiers(tuple(r // k for r in range(n)), a2, b2)
        model = costs(m, k, args.size, *links)
        late, prompt, extra = {}, {}, {}
        extra["W"] = pieces = model_pieces(m, k, args.size, *links)
        extra["floor"] = floor(m, k, args.size, args.bandwidth, b2)
        late[HRING] = prompt[HRING] = model[HRING].post_arrival
        for name in (HIERARCHICAL,) + _FLAT_NAMES:
            schedule = _hierarchical(m, k, pieces) if name == HIERARCHICAL else build(name, n)
            sim = simulate(schedule, args.size, args.alpha, args.bandwidth, [0.0] * (n - 1) + [1e3],
                           tiers)
            late[name] = sim.post_arrival
            if name == HIERARCHICAL:
                extra["phase1"] = sim.phase1_end
            prompt[name] = simulate(schedule, args.size, args.alpha, args.bandwidth, None, tiers).finish
        rows.append((m, late, prompt, extra))
    _print_late(rows, k)
    print("\nno straggler (everyone arrives at 0; time to finish):")
    names = (HIERARCHICAL, HRING) + _FLAT_NAMES
    print(f"{'nodes':>5} {'n':>5} " + " ".join(f"{a:>12}" for a in names))
    for m, _, times, _ in rows:
        print(f"{m:>5} {m * k:>5} " + " ".join(f"{times[a] * 1e3:>12.3f}" for a in names))
    return 0


def _hierarchical(m, k, pieces):
    from .hierarchical import hierarchical
    return hierarchical(_layout(m * k, k, "block"), m * k - 1, pieces)


def _print_late(rows, k) -> None:
    print("\nstraggler late enough to hide phase 1 (time after it arrives; phase 1 = its length):")
    head = ("W", HIERARCHICAL, "phase 1", HRING, "floor", "hier/hring", "p1/hring", "hier/floor")
    print(f"{'nodes':>5} {'n':>5} " + " ".join(f"{h:>12}" for h in head)
          + " " + " ".join(f"{a:>10}" for a in _FLAT_NAMES))
    for m, late, _, extra in rows:
        h, p1, ring, lo = late[HIERARCHICAL], extra["phase1"], late[HRING], extra["floor"]
        cells = [f"{extra['W']:>12}"] + [f"{t * 1e3:>12.3f}" for t in (h, p1, ring, lo)]
        cells += [f"{r:>12.2f}" for r in (h / ring, p1 / ring, h / lo)]
        print(f"{m:>5} {m * k:>5} " + " ".join(cells) + " "
              + " ".join(f"{late[a] * 1e3:>10.3f}" for a in _FLAT_NAMES))


def cmd_search(args) -> int:
    """Search greedy seeds offline; merge the best into the seeds file."""
    from .stragglar import best_seed
    path = Path(args.out)
    data = json.loads(path.read_text()) if path.exists() else {"seeds": {}}
    for n in args.n:
        if n < 3 or n & (n - 1) == 0:
            continue
        seed, rounds = best_seed(n, args.tries, args.seconds)
        old = data["seeds"].get(str(n))
        if old is None or rounds < len(_greedy(n, old)):
            data["seeds"][str(n)] = seed
        print(f"n={n} seed={seed} rounds={rounds} bound={lower_bound_rounds(n)}", flush=True)
        data["seeds"] = dict(sorted(data["seeds"].items(), key=lambda kv: int(kv[0])))
        path.write_text(json.dumps(data, indent=0) + "\n")
    return 0


def _greedy(n: int, seed: int) -> list:
    from .augmenting import greedy_rounds
    return greedy_rounds(n, seed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stragglar_mpi.schedule",
                                     description="Show, verify and simulate AllReduce schedules.")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print a schedule round by round (or as JSON)")
    show.add_argument("--n", type=parse_ns, required=True, help="ranks: 8, 4,8 or 2..16")
    show.add_argument("--algorithm", default=STRAGGLAR, choices=ALGORITHMS + TOPOLOGY_ALGORITHMS)
    show.add_argument("--straggler", type=int, default=None, help="late rank (default n-1)")
    show.add_argument("--node-size", type=int, default=0,
                      help="ranks per node (hierarchical, hring)")
    show.add_argument("--layout", choices=("block", "cyclic"), default="block",
                      help="which ranks share a node: consecutive ones or every m-th")
    show.add_argument("--phase", type=int, choices=(1, 2), default=2,
                      help="hierarchical: phase 1 (during the delay) or phase 2 (after it)")
    show.add_argument("--pieces", type=_positive_int, default=None,
                      help="hierarchical: pieces per slice (default: 1 for two nodes, "
                           "else ceil(log2 nodes))")
    show.add_argument("--json", action="store_true", help="print the JSON form")
    show.set_defaults(run=cmd_show)
    check = sub.add_parser("verify", help="verify schedules symbolically; report rounds vs bound")
    check.add_argument("--n", type=parse_ns, required=True, help="ranks: 8, 4,8 or 2..256")
    check.add_argument("--algorithm", type=_algorithms, default=list(ALGORITHMS),
                       help="comma-separated list or 'all' (default all)")
    check.add_argument("--every-straggler", action="store_true",
                       help="verify every choice of straggler rank, not only n-1")
    check.set_defaults(run=cmd_verify)
    sim = sub.add_parser("simulate", help="alpha-beta model: every algorithm, late and not late")
    sim.add_argument("--n", type=parse_ns, default=parse_ns("4,8,16,32,64,128,256"))
    sim.add_argument("--size", type=parse_size, default="1G", help="e.g. 1G, 64M (default 1G)")
    sim.add_argument("--alpha", type=parse_time, default=parse_time("3us"), help="e.g. 3us")
    sim.add_argument("--bandwidth", type=parse_bandwidth, default=parse_bandwidth("450GiB/s"),
                     help="e.g. 450GiB/s")
    sim.add_argument("--delay", type=time_in("ms"), default=None,
                     help="straggler delay: a bare number in ms, or with a unit (5ms, 0.005s) "
                          "(default: just long enough to hide phase 1)")
    sim.add_argument("--node-size", type=int, default=0,
                     help="ranks per node: two tiers (--alpha/--bandwidth inside a node, "
                          "--alpha-inter/--bandwidth-inter between), hierarchical algorithms")
    sim.add_argument("--alpha-inter", type=parse_time, default=None,
                     help="latency between nodes, e.g. 5us (default: --alpha)")
    sim.add_argument("--bandwidth-inter", type=parse_bandwidth, default=None,
                     help="bandwidth between nodes, e.g. 50GB/s (default: --bandwidth)")
    sim.set_defaults(run=cmd_simulate)
    search = sub.add_parser("search", help="search greedy seeds for n that miss the bound")
    search.add_argument("--n", type=parse_ns, required=True)
    search.add_argument("--tries", type=_positive_int, default=100, help="seeds to try per n")
    search.add_argument("--seconds", type=parse_time, default=10.0, help="time budget per n")
    search.add_argument("--out", default=str(Path(__file__).parent / "data" / "seeds.json"))
    search.set_defaults(run=cmd_search)
    args = parser.parse_args(argv)
    straggler = getattr(args, "straggler", None)
    if straggler is not None and not 0 <= straggler < min(args.n):
        parser.error(f"--straggler {straggler} is not a rank of n={min(args.n)} (0..{min(args.n) - 1})")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
