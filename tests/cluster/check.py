"""The MPI program the box's tests run across hosts (hydra or srun), two modes.

    check.py correct [--algos auto,stragglar,hierarchical,hring] [--late-ms 20]
        every algorithm x {blocking Allreduce, Iallreduce, Allreduce_init} x sizes x
        (float64 SUM, int32 MAX), a random rank late; each result compared exactly with
        mpi4py's comm.Allreduce on the same input; then straggler="arrival" calls in which
        one rank of the last host sleeps first (--arrival-late-ms): the arrival record must name it.  Rank 0
        prints "check: ... errors 0 ..."; any wrong result exits 1.
    check.py fault --out DIR [--algo hierarchical] [--late-ms 800]
        calls in a loop (the last rank late before each, so that a call is pending on the
        others) until a call raises; each rank writes DIR/rank<r>.json: what it raised,
        the missing ranks, the seconds from the call's start to the error, whether the
        receive buffer changed in the 1.5 s after the error.  A rank that got a wrong
        result exits 4, one that raised exits 3.  The test cuts a link or kills ranks.
"""
import argparse
import faulthandler
import json
import os
import signal
import socket
import sys
import time
import traceback

import numpy as np
from mpi4py import MPI

import stragglar_mpi
from stragglar_mpi import Allreduce, Allreduce_init, Iallreduce, stats

HOST = socket.gethostname()


def node_sizes(comm):
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    size = node.Get_size()
    node.Free()
    hosts = comm.allgather(HOST)
    return size, hosts


def one(comm, mode, algo, send, recv, op):
    if mode == "blocking":
        Allreduce(comm, send, recv, op, algorithm=algo)
    elif mode == "nonblocking":
        Iallreduce(comm, send, recv, op, algorithm=algo).Wait()
    else:
        req = Allreduce_init(comm, send, recv, op, algorithm=algo)
        for _ in range(2):          # a persistent request runs more than once
            recv[...] = 0
            req.Start()
            req.Wait()
        req.Free()


def correct(comm, args):
    rank, n = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(12345)           # the same draws on every rank
    errors, calls = 0, 0
    for algo in args.algos.split(","):
        for mode in ("blocking", "nonblocking", "persistent"):
            for count in (1, 4099, 3 * n + 1, 70001):
                for code, op in (("d", MPI.SUM), ("i", MPI.MAX)):
                    late = int(rng.integers(n))
                    if rank == late:
                        time.sleep(args.late_ms / 1000)
                    send = ((np.arange(count) * 7 + rank * 13 + calls) % 101).astype(code)
                    recv = np.zeros_like(send)
                    one(comm, mode, algo, send, recv, op)
                    ref = np.empty_like(send)
                    comm.Allreduce(send, ref, op)
                    if not np.array_equal(recv, ref):
                        errors += 1
                        print(f"check: WRONG rank {rank} {algo} {mode} count {count} {code}", flush=True)
                    calls += 1
    named, late = [], n - 1                     # the last rank: on the last host in block layouts
    for it in range(8):
        comm.Barrier()
        if rank == late:
            time.sleep(args.arrival_late_ms / 1000)
        send = np.full(3 * n + 1, float(rank + it))
        recv = np.zeros_like(send)
        Allreduce(comm, send, recv, algorithm="stragglar", straggler="arrival")
        errors += int(not np.all(recv == sum(r + it for r in range(n))))
        named.append(stats(comm)["last"]["straggler"])
    misnamed = sum(s != late for s in named)
    total = comm.allreduce(errors)
    size, hosts = node_sizes(comm)
    sizes = comm.allgather(size)
    if rank == 0:
        layout = ",".join(f"{h}" for h in hosts)
        print(f"check: {n} ranks on {layout}; node sizes {sizes}; {calls} calls x {n} ranks, errors {total}; "
              f"arrival named rank {late} in {8 - misnamed}/8 calls ({named})", flush=True)
    ok = total == 0 and misnamed <= 1
    return 0 if ok else 1


def write(path, record):
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.rename(path + ".tmp", path)


def fault(comm, args):
    rank, n = comm.Get_rank(), comm.Get_size()
    count = 3 * n + 1 if args.count is None else args.count
    Allreduce(comm, np.ones(count), np.zeros(count), algorithm=args.algo)     # setup
    comm.Barrier()
    out = os.path.join(args.out, f"rank{rank}.json")
    open(os.path.join(args.out, f"ready{rank}"), "w").close()
    record = {"rank": rank, "host": HOST, "pid": os.getpid()}
    it = 0
    while True:
        if rank == n - 1:
            time.sleep(args.late_ms / 1000)
        send = np.full(count, float(rank + it))
        recv = np.zeros_like(send)
        began = time.monotonic()
        try:
            Allreduce(comm, send, recv, algorithm=args.algo)
        except Exception as exc:    # noqa: BLE001: whatever it is, it is the outcome
            took = time.monotonic() - began
            seen = recv.copy()
            record.update(outcome=type(exc).__name__, message=str(exc)[:400], calls=it, at=time.time(),
                          missing=list(getattr(exc, "missing", ()) or ()),
                          peers=list(getattr(exc, "peers", ()) or ()),
                          phase=str(getattr(exc, "phase", None)), seconds=round(took, 3),
                          written_after=None)
            write(out, record)          # first: the launcher may kill this rank in the wait below
            time.sleep(1.5)
            write(out, dict(record, written_after=not np.array_equal(seen, recv)))
            sys.stdout.flush()
            os._exit(3)
        if not np.all(recv == sum(r + it for r in range(n))):
            record.update(outcome="wrong", calls=it)
            write(out, record)
            os._exit(4)
        it += 1
        if it >= args.calls:
            record.update(outcome="completed", calls=it)
            write(out, record)
            return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["correct", "fault"])
    p.add_argument("--algos", default="auto,stragglar,hierarchical,hring")
    p.add_argument("--algo", default="hierarchical")
    p.add_argument("--late-ms", type=float, default=None)
    p.add_argument("--arrival-late-ms", type=float, default=100,
                   help="how late the last rank is in the arrival calls (over a lossy link: more than TCP's retransmission)")
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--count", type=int, default=None)
    p.add_argument("--out")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    if args.out:        # `kill -USR1` writes this rank's threads' stacks there (a rank that hangs)
        stacks = open(os.path.join(args.out, f"stacks{comm.Get_rank()}.txt"), "w")
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    if args.mode == "correct":
        args.late_ms = 20 if args.late_ms is None else args.late_ms
        rc = correct(comm, args)
    else:
        args.late_ms = 800 if args.late_ms is None else args.late_ms
        rc = fault(comm, args)
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(2)
