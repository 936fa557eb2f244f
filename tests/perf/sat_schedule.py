"""Exact search (SAT) behind docs/SCHEDULES.md "Not done: a construction for every n".

    pip install python-sat
    python tests/perf/sat_schedule.py bound 5 6 7 9 10 11 12 13 14
    python tests/perf/sat_schedule.py periodic --period 1 --n 4..16

``bound``: is there a phase-2 schedule of n-2+ceil(log2 n) rounds for n ranks
(straggler n-1, round r < n-1 the exchange of chunk r, one send and one receive
per rank per round, copies only of chunks the sender holds fully reduced)?
``periodic``: is there a pattern, the same every ``period`` rounds in
coordinates relative to the busy rank, in which every chunk is everywhere
ceil(log2 n) rounds after its exchange?  Research only: not used by the library.
"""
import argparse
import sys
import time



def parse_ns(text):
    """'4..16' or '4,8,16' (stand-alone: runs where python-sat is, without MPI)."""
    ns = []
    for part in text.split(","):
        lo, sep, hi = part.partition("..")
        ns += range(int(lo), int(hi) + 1) if sep else [int(lo)]
    return ns


def _solver():
    try:
        from pysat.card import CardEnc, EncType
        from pysat.formula import IDPool
        from pysat.solvers import Cadical153
    except ImportError:
        sys.exit("needs python-sat: pip install python-sat")
    return CardEnc, EncType, IDPool, Cadical153


def _at_most_one(groups, pool):
    CardEnc, EncType, _, _ = _solver()
    return [c for lits in groups if len(lits) > 1
            for c in CardEnc.atmost(lits, 1, vpool=pool, encoding=EncType.seqcounter).clauses]


def bound_reachable(n):
    _, _, IDPool, Solver = _solver()
    m, L = n - 1, (n - 1).bit_length()
    T, S = n - 2 + L, n - 1
    pool, clauses, x = IDPool(), [], {}
    for t in range(T):
        for u in range(n):
            if u == S and t < m:
                continue                      # the straggler only exchanges until round n-2
            for v in range(m):
                if u != v and not (t < m and t in (u, v)):
                    for c in range(m):
                        x[t, u, v, c] = pool.id(("x", t, u, v, c))
    held = lambda t, u, c: pool.id(("h", t, u, c))  # noqa: E731  early rank u holds c at round t
    for u in range(m):
        for c in range(m):
            clauses += [[-held(0, u, c)], [held(T, u, c)]]
            for t in range(T):
                if t < m and u == t == c:
                    clauses.append([held(t + 1, u, c)])          # the exchange
                    continue
                ins = [x[t, w, u, c] for w in range(n) if (t, w, u, c) in x]
                clauses.append([-held(t + 1, u, c), held(t, u, c)] + ins)
                clauses += [[-held(t, u, c), held(t + 1, u, c)]] + [[-y, held(t + 1, u, c)] for y in ins]
    for (t, u, v, c), y in x.items():
        clauses.append([-y, -held(t, v, c)])
        if u != S:
            clauses.append([-y, held(t, u, c)])
    sends, recvs = {}, {}
    for (t, u, v, c), y in x.items():
        sends.setdefault((t, u), []).append(y)
        recvs.setdefault((t, v), []).append(y)
    clauses += _at_most_one(list(sends.values()) + list(recvs.values()), pool)
    return Solver(bootstrap_with=clauses).solve()


def periodic_pattern(m, period):
    """Holder sets per chunk class and step; ports per round class (see the module doc)."""
    _, _, IDPool, Solver = _solver()
    K = m.bit_length()
    pool, clauses = IDPool(), []
    g = lambda q, k, a: pool.id(("g", q, k, a % m))               # noqa: E731
    y = lambda q, k, a, b: pool.id(("y", q, k, a % m, b % m))     # noqa: E731
    for q in range(period):
        for a in range(m):
            clauses += [[g(q, 1, a) if a == 0 else -g(q, 1, a)], [g(q, K + 1, a)]]
        for k in range(1, K + 1):
            for b in range(m):
                ins = [y(q, k, a, b) for a in range(m) if a != b]
                clauses.append([-g(q, k + 1, b), g(q, k, b)] + ins)
                clauses += [[-g(q, k, b), g(q, k + 1, b)]] + [[-i, g(q, k + 1, b)] for i in ins]
                for a in range(m):
                    if a != b:
                        clauses += [[-y(q, k, a, b), g(q, k, a)], [-y(q, k, a, b), -g(q, k, b)]]
                        if (a - k) % m == 0 or (b - k) % m == 0:
                            clauses.append([-y(q, k, a, b)])      # the busy rank
    groups = []
    for r in range(period):
        for x in range(m):
            groups.append([y((r - k) % period, k, x + k, b) for k in range(1, K + 1)
                           for b in range(m) if (b - x - k) % m])
            groups.append([y((r - k) % period, k, a, x + k) for k in range(1, K + 1)
                           for a in range(m) if (a - x - k) % m])
    clauses += _at_most_one(groups, pool)
    return Solver(bootstrap_with=clauses).solve()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    b = sub.add_parser("bound")
    b.add_argument("n", type=int, nargs="+")
    q = sub.add_parser("periodic")
    q.add_argument("--period", type=int, default=1)
    q.add_argument("--n", type=parse_ns, required=True)
    args = p.parse_args()
    for n in (args.n if args.what == "periodic" else args.n):
        start = time.perf_counter()
        ok = bound_reachable(n) if args.what == "bound" else periodic_pattern(n - 1, args.period)
        what = "bound reachable" if args.what == "bound" else f"period-{args.period} pattern"
        print(f"n={n}: {what}: {'yes' if ok else 'NO'} ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
