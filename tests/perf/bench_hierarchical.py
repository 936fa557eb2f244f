"""Hierarchical StragglAR at cluster scale: one rank's plan, both phases, nodes of 8.

    python tests/perf/bench_hierarchical.py                  # 128 and 512 nodes (docs/SCHEDULES.md)
    python tests/perf/bench_hierarchical.py --nodes 4,16     # any node counts

No MPI: what one rank computes before its first call, its schedule (``rank_rounds``:
its own transfers, not the whole schedule) and ``compile_rounds``.  Caches cleared
before every build; the pieces are the model's for 1 GiB.  CPU seconds, best of 3
(on a shared machine only those are stable), worst over 8 ranks x 2 phases.
"""
import argparse
import time

from stragglar_mpi.run.plan import compile_rounds
from stragglar_mpi.schedule import hierarchical as module
from stragglar_mpi.schedule.hierarchical import rank_rounds
from stragglar_mpi.schedule.tiers import pieces as model_pieces

LINKS = (3e-6, 450e9, 5e-6, 50e9)


def _cold(nodes, straggler, rank, pieces, phase) -> float:
    best = None
    for _ in range(3):
        for cached in (module.spread, module._offset, module._layout, module.spread_rounds):
            cached.cache_clear()
        cpu = time.process_time()
        chunks, rounds = rank_rounds(nodes, straggler, rank, pieces, phase)
        compile_rounds(rounds, chunks, rank, 1 << 28, 4, False, True, ())
        took = time.process_time() - cpu
        best = took if best is None else min(best, took)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="128,512")
    parser.add_argument("--node-size", type=int, default=8)
    args = parser.parse_args(argv)
    k = args.node_size
    for m in map(int, args.nodes.split(",")):
        n = m * k
        nodes = tuple(tuple(range(i * k, (i + 1) * k)) for i in range(m))
        pieces = model_pieces(m, k, 2**30, *LINKS)
        ranks = (n - 1, n - 2, 0, 1, n // 2, n - k, k, n // 3)
        worst = max(_cold(nodes, n - 1, r, pieces, phase) for r in ranks for phase in (1, 2))
        print(f"{m} nodes of {k} ({n} ranks), W={pieces}: one rank's plan, both phases, "
              f"worst {worst * 1e3:.1f} ms CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
