"""What arrival tracking costs per call: the notices and the record ("record", what a
sampled "auto" call or a call under STRAGGLAR_TIMEOUT pays) and those plus the roles
("roles", what straggler="arrival" pays). No data moves; every rank enters together
after a Barrier, so the figure is the work itself, not a wait for a late rank.

    mpiexec -n 8 python tests/perf/bench_arrival.py [--iters 200]
    MPIR_CVAR_NUM_CLIQUES=4 UCX_TLS=tcp,self mpiexec -n 16 python tests/perf/bench_arrival.py
    python tests/perf/bench_arrival.py --model 4096      # the message counts, modelled (no MPI run)
    mpiexec -n 8 python tests/perf/bench_arrival.py --compare [--iters 200]

``--compare``: both arrival tables (notices to every rank, groups and aggregators) on
two communicators of the same ranks, timed in alternating blocks of calls so that both
see the same load; one line per table and the ratio groups / notices.

Prints one line: ranks, nodes, the median per call in microseconds (the slowest rank's
time of each call) for "record" and "roles", the arrival messages a rank sent per call
(the most any rank sent in one call / the mean over ranks and calls), and the setup time.
"""
import argparse
import math
import statistics
import time


def nodes(comm):
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    leader = node.allreduce(comm.Get_rank(), op=MPI.MIN)
    node.Free()
    return len(set(comm.allgather(leader)))


def timed(comm, state, kind, iters, warmup=5):
    """(median us, the most sent by a rank in one call, the mean sent) and the samples."""
    from types import SimpleNamespace
    from mpi4py import MPI
    from stragglar_mpi.decide import roles as _roles
    from stragglar_mpi.run._interpreter import drive
    n = comm.Get_size()
    arrivals = state.arrivals()
    # "record": a call tracked only to name missing ranks (a deadline: far off); "roles": by arrival
    name = "ring" if kind == "record" else "stragglar"
    args = SimpleNamespace(name=name, policy="arrival", n=n, out=SimpleNamespace(count=8, extent=1))
    samples, most, sent = [], 0, 0
    for it in range(iters + warmup):
        comm.Barrier()
        before = arrivals.sent_total
        t0 = time.perf_counter()
        drive(_roles.decide(state, args, MPI.Wtime() + 3600 if kind == "record" else 0.0))
        drive(_roles.settle(state))
        t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if it >= warmup:
            samples.append(t)
            mine = arrivals.sent_total - before
            most = max(most, comm.allreduce(mine, op=MPI.MAX))
            sent += comm.allreduce(mine, op=MPI.SUM)
    return statistics.median(samples) * 1e6, most, sent / n / iters, samples


def table_state(world, least):
    """A new communicator whose arrival table follows STRAGGLAR_ARRIVAL_GROUPS=``least``."""
    import os
    from stragglar_mpi import configure
    from stragglar_mpi.call.allreduce import state_of
    before = os.environ.get("STRAGGLAR_ARRIVAL_GROUPS")
    os.environ["STRAGGLAR_ARRIVAL_GROUPS"] = str(least)
    configure()
    comm = world.Dup()
    state = state_of(comm)
    if before is None:
        del os.environ["STRAGGLAR_ARRIVAL_GROUPS"]
    else:
        os.environ["STRAGGLAR_ARRIVAL_GROUPS"] = before
    configure()
    return comm, state


def compare(world, iters, blocks=10):
    """Both tables on the same ranks, in alternating blocks of ``iters // blocks`` calls."""
    tables = {"notices": table_state(world, world.Get_size() + 1), "groups": table_state(world, 2)}
    got = {(p, kind): [[], 0, 0.0] for p in tables for kind in ("record", "roles")}
    per = max(1, iters // blocks)
    for _ in range(blocks):
        for kind in ("record", "roles"):
            for p, (comm, state) in tables.items():
                _, most, mean, samples = timed(comm, state, kind, per, warmup=1)
                entry = got[(p, kind)]
                entry[0] += samples
                entry[1] = max(entry[1], most)
                entry[2] += mean / blocks
    n, count = world.Get_size(), nodes(world)
    if world.Get_rank() == 0:
        median = {key: statistics.median(v[0]) * 1e6 for key, v in got.items()}
        for p in tables:
            assert tables[p][1].arrivals().protocol == p
            print(f"ranks {n:3d}  nodes {count}  {p:8s} record {median[(p, 'record')]:8.1f} us  "
                  f"roles {median[(p, 'roles')]:8.1f} us  messages record {got[(p, 'record')][1]} / "
                  f"{got[(p, 'record')][2]:.1f}  roles {got[(p, 'roles')][1]} / {got[(p, 'roles')][2]:.1f}",
                  flush=True)
        print(f"ranks {n:3d}  nodes {count}  groups / notices: record "
              f"{median[('groups', 'record')] / median[('notices', 'record')]:.2f}  roles "
              f"{median[('groups', 'roles')] / median[('notices', 'roles')]:.2f}", flush=True)
    for comm, _ in tables.values():
        comm.Free()


def model(n, per_node=4):
    """Arrival messages per rank and call, counted from the structures the library builds
    (at most 2 notices, 2 reports from an aggregator, which sends 1 notice, 2 forwards of
    the roles and 1 to the straggler from the coordinator, ceil(log2 n) for the record:
    at most 5 + ceil(log2 n); a coordinator that came last asks up to 2 more), here for
    one typical call
    (nodes of ``per_node`` ranks, cyclic; the last rank late; rank 0 the coordinator):
    (most sent by one rank with roles, mean with roles, most without, the most any rank
    receives with roles, rounds after the last early arrival until the last early rank
    has its role, rounds of the record after the plan)."""
    from stragglar_mpi.decide.arrival import aggregators_of, groups_of, tree_children
    node_of = [r % max(1, n // per_node) for r in range(n)]
    groups = groups_of(n, node_of)
    pairs = aggregators_of(groups, None)
    lead, late = 0, n - 1
    rounds = math.ceil(math.log2(n))
    group_of = {r: i for i, g in enumerate(groups) for r in g}
    sends, recvs, record_only = [], [0] * n, []
    for r in range(n):
        pair = pairs[group_of[r]]
        notices = sum(a != r for a in pair)
        for a in pair:
            if a != r:
                recvs[a] += 1
        report = int(r in pair and r != lead and r != late)
        if report:
            recvs[lead] += 1
        children = tree_children(r, lead, late, n)
        for ch in children:
            recvs[ch] += 1
        fan = len(children) + (r == lead)
        sends.append(notices + report + fan + rounds)
        record_only.append(notices + rounds)
    recvs[late] += 1
    recvs = [v + rounds for v in recvs]
    depth = int(math.floor(math.log2(max(1, n - 1))))
    return max(sends), sum(sends) / n, max(record_only), max(recvs), 2 + depth, rounds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--model", type=int, default=0, help="print the modelled counts up to this many ranks")
    p.add_argument("--compare", action="store_true",
                   help="time both arrival tables (notices to every rank, groups) side by side")
    args = p.parse_args()
    if args.model:
        print("ranks  sent: bound / most / mean (roles)  most (record)  received: most  "
              "rounds: roles / record   [before: sent and received n-1, rounds 2 / 0]")
        n = 4
        while n <= args.model:
            most, mean, rec, got, hops, rounds = model(n)
            print(f"{n:5d}  {5 + rounds:4d} / {most:4d} / {mean:5.1f}   {rec:4d}   {got:5d}   {hops:3d} / {rounds:3d}"
                  f"   [{n - 1}]", flush=True)
            n *= 2
        return
    from mpi4py import MPI
    from stragglar_mpi.call.allreduce import state_of
    if args.compare:
        compare(MPI.COMM_WORLD, args.iters)
        return
    comm = MPI.COMM_WORLD.Dup()
    comm.Barrier()
    t0 = time.perf_counter()
    state = state_of(comm)
    setup = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX) * 1e3
    (record, rmost, rmean, _), (roles, most, mean, _) = (timed(comm, state, kind, args.iters)
                                                         for kind in ("record", "roles"))
    count = nodes(comm)
    if comm.Get_rank() == 0:
        print(f"ranks {comm.Get_size():3d}  nodes {count}  record {record:8.1f} us  "
              f"roles {roles:8.1f} us  messages record {rmost} / {rmean:.1f}  roles {most} / {mean:.1f}  "
              f"setup {setup:7.1f} ms", flush=True)


if __name__ == "__main__":
    main()
