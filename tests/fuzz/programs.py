"""Seeded random *legal* MPI programs over stragglar_mpi, and their interpreter.

``generate(seed, n, features)`` is a pure function: every rank of an ``n``-rank job
computes the same ``Program`` (a list of plain actions) from the seed, including what
is drawn per rank (which rank is late before a call and for how long, the progress
thread's delays, every buffer's contents).  ``execute(program, ...)`` runs it on
COMM_WORLD; every result (ours, and mpi4py's own collectives in the program) is
checked exactly against the reduction of the known per-rank inputs, computed locally
(``inputs`` and ``expected``: small integers, so float64 sums are exact); with
``oracle=True`` the same expected values are also checked against mpi4py's
``MPI.Comm.Allreduce`` on a native communicator of the same members after the program.

A program mixes, on 1-3 communicators (COMM_WORLD, ``Comm(COMM_WORLD)``, a Dup, a
Split, raw or wrapped): blocking ``Allreduce`` (function and ``Comm`` method),
``Iallreduce``, persistent ``Allreduce_init`` with Start/Startall (ours and mpi4py's
persistent collectives mixed), the caller's own mpi4py collectives between a start and
its completion (Barrier, allreduce of an object, a native Iallreduce, Ibarrier), sizes
on both sides of auto's small-size cut (STRAGGLAR_AUTO_MIN_BYTES, set per program) with
bursts of one size class above it (auto's measuring rounds), every algorithm and
straggler policy, a late rank, completion by Wait / Test loops / Waitall / Waitany /
Waitsome / Testall in random orders, ``configure()`` between calls, Cancel, and Free of
communicators.

Features that may be switched off (``FEATURES``; ``features`` is the set switched on):

- ``cancel``: every rank calls Cancel on the same started request, then completes it:
  the operation must complete normally (``Is_cancelled()`` False, the full result).
- ``configure_pending``: ``configure()`` while nonblocking operations are in flight
  (off: only when none is).
- ``free_pending``: Free of a communicator with operations in flight (MPI: they
  complete normally) and of one whose persistent requests are not freed yet.
- ``measure_race``: a blocking ``auto`` call above the cut (which may run a measuring
  round, with its agreement ``Iallreduce``) while nonblocking operations of the same
  communicator are in flight (off: only when none is).
- ``prequest_start``: mpi4py's own ``MPI.Prequest.Startall``/``Start`` on ours (and a
  mix with mpi4py's persistent requests).
- ``prequest_bool``: ``bool()`` of our inactive persistent request must be True, as an
  mpi4py persistent request's is (its handle is not MPI_REQUEST_NULL until freed).
- ``single_checked``: STRAGGLAR_VALIDATE=1 together with STRAGGLAR_TIMEOUT in a program
  that has a communicator of one rank (found by this fuzzer: a call there hangs, even a
  blocking one; off: such a program never sets both).
- ``delay``: the progress thread's delay hook (``ENGINE.delay``) sleeps at random.
- ``late``: a rank sleeps (0-50 ms) before some calls.
"""
from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field

import numpy as np

FEATURES = ("cancel", "configure_pending", "free_pending", "measure_race", "prequest_start",
            "prequest_bool", "single_checked", "delay", "late")
#: The features known to fail today (the engine fixes are under way).
BROKEN = ("prequest_start",)   # mpi4py's own Start on our requests: not supported (README)
SAFE = tuple(f for f in FEATURES if f not in BROKEN)

ALGORITHMS = ("auto", "stragglar", "hierarchical", "hring", "ring", "rhd", "direct", "native")
POLICIES = (None, "arrival", "predict")      # or a rank
DTYPES = ("float64", "int64")
OPS = ("SUM", "SUM", "SUM", "SUM", "MAX", "MIN")
CUTS = (512, 4096, 32768)                    # STRAGGLAR_AUTO_MIN_BYTES of a program
MAX_COUNT = 24000                            # elements (8 bytes each)
#: The fuzzer's own tests (tests/test_fuzz.py): "wrong" corrupts a result on rank 0,
#: "hang" stops the last rank at the end of each program, "error" raises on rank 0.
SABOTAGE = os.environ.get("SMPI_FUZZ_SABOTAGE", "")


def parse_features(text):
    """"all", "safe", "none" or a comma list; "-name" removes one (e.g. "all,-cancel")."""
    chosen = set()
    for word in (w.strip() for w in (text or "all").split(",")):
        if not word:
            continue
        if word in ("all", "safe", "none"):
            chosen |= set({"all": FEATURES, "safe": SAFE, "none": ()}[word])
        elif word.startswith("-") and word[1:] in FEATURES:
            chosen.discard(word[1:])
        elif word in FEATURES:
            chosen.add(word)
        else:
            raise ValueError(f"unknown fuzz feature {word!r}; known: {', '.join(FEATURES)} "
                             "(or all, safe, none, -name)")
    return frozenset(chosen)


def features_text(features):
    return ",".join(f for f in FEATURES if f in features) or "none"


# --- the program ---------------------------------------------------------------------

@dataclass
class CommSpec:
    cid: int
    kind: str                # world | wrapped | dup | split
    wrapped: bool            # a stragglar_mpi.Comm (its methods are ours)
    members: tuple           # world ranks, in the communicator's rank order
    color: int = 0           # split: this rank's colour is colors[world rank]
    colors: tuple = ()
    keys: tuple = ()


@dataclass
class Spec:
    """One reduction's arguments (shared by a persistent request's starts)."""
    count: int
    dtype: str
    op: str
    in_place: bool
    algorithm: str | None    # None: the default (auto)
    straggler: object        # None, "arrival", "predict" or a rank of the communicator
    api: str                 # "func" (stragglar_mpi.X) or "method" (Comm.X, the defaults)


@dataclass
class Program:
    seed: int
    n: int
    features: frozenset
    cut: int
    comms: list
    actions: list
    delay_p: float
    delay_max: float
    settings0: dict
    notes: dict = field(default_factory=dict)

    def describe(self):
        kinds = {}
        for a in self.actions:
            kinds[a[0]] = kinds.get(a[0], 0) + 1
        return (f"seed {self.seed} n={self.n} cut={self.cut} comms="
                f"{[c.kind + ('+Comm' if c.wrapped and c.kind != 'wrapped' else '') for c in self.comms]} "
                f"actions={len(self.actions)} {kinds}")


def _settings(rng, cut, single=False):
    """A legal set of STRAGGLAR_* values for configure() (every rank the same); ``single``:
    the program has a one-rank communicator and feature single_checked is off."""
    s = {"STRAGGLAR_AUTO_MIN_BYTES": str(cut)}
    if rng.random() < 0.15:
        s["STRAGGLAR_ALGO"] = rng.choice(ALGORITHMS)
    if rng.random() < 0.2:
        s["STRAGGLAR_AUTO_MEASURE"] = "0"
    if rng.random() < 0.2:
        s["STRAGGLAR_VALIDATE"] = "1"
    if rng.random() < 0.15:
        s["STRAGGLAR_TIMEOUT"] = "120"        # legal and long: the tracked paths, never expiring
    if rng.random() < 0.15:
        s["STRAGGLAR_MODEL"] = rng.choice(["1e-6,1e8,1.0", "1e-5,1e10,1.05", "1e-4,1e7,2.0"])
    if single and "STRAGGLAR_VALIDATE" in s:
        s.pop("STRAGGLAR_TIMEOUT", None)
    return s


class _Gen:
    """The generator's model of the program so far: what is in flight where."""

    def __init__(self, seed, n, features):
        self.rng = random.Random(f"stragglar-fuzz-{seed}-{n}")
        self.seed, self.n, self.features = seed, n, features
        self.actions = []
        self.next_op = 0
        self.next_req = 0
        self.pending = {}        # req id -> comm id (started, not completed)
        self.cancellable = set()  # req ids of ours (Iallreduce / our persistent) in flight
        self.preqs = {}          # preq id -> (comm id, kind, active)
        self.freed = set()

    def op_id(self):
        self.next_op += 1
        return self.next_op

    def req_id(self):
        self.next_req += 1
        return self.next_req

    def late(self):
        """(rank, seconds) that sleeps before the next call, or None."""
        if "late" not in self.features or self.rng.random() > self.p_late:
            return None
        return (self.rng.randrange(self.n), round(self.rng.uniform(0, self.late_max), 4))

    def spec(self, comm, count=None, big=None, algorithm="draw", api="draw"):
        rng = self.rng
        if count is None:
            if big is None:
                big = rng.random() < 0.5
            lo, hi = (self.cut // 8, min(4 * self.cut // 8, MAX_COUNT)) if big else (0, self.cut // 8 - 1)
            count = rng.randint(max(lo, 0), max(hi, lo))
            if not big and rng.random() < 0.05:
                count = rng.choice([0, 1])
        if api == "draw":
            api = "method" if comm.wrapped and rng.random() < 0.3 else "func"
        if api == "method":
            algorithm, straggler = None, None
        else:
            if algorithm == "draw":
                algorithm = rng.choice(ALGORITHMS + ("auto", None))
            straggler = rng.choice(POLICIES + ("rank",))
            if straggler == "rank":        # a rank of every colour's communicator
                straggler = rng.randrange(_comm_size_any(comm, self.n))
        return Spec(count, rng.choice(DTYPES), rng.choice(OPS), rng.random() < 0.3,
                    algorithm, straggler, api)

    def live_comms(self):
        return [c for c in self.comms if c.cid not in self.freed]

    def inflight_on(self, cid):
        return [r for r, c in self.pending.items() if c == cid]


def generate(seed, n, features=frozenset(FEATURES), steps=None) -> Program:
    """The program of ``seed`` at ``n`` ranks: the same on every rank."""
    g = _Gen(seed, n, features)
    rng = g.rng
    g.cut = rng.choice(CUTS)
    g.p_late = rng.choice([0.1, 0.3])
    g.late_max = rng.choice([0.005, 0.05])
    delay_p = rng.choice([0.05, 0.2, 0.5]) if "delay" in features else 0.0
    delay_max = rng.choice([0.002, 0.02])

    comms = [CommSpec(0, rng.choice(["world", "wrapped"]), False, tuple(range(n)))]
    comms[0].wrapped = comms[0].kind == "wrapped"
    for cid in range(1, rng.choice([1, 2, 2, 3])):
        wrapped = rng.random() < 0.5
        if rng.random() < 0.5:
            comms.append(CommSpec(cid, "dup", wrapped, tuple(range(n))))
        else:
            how = rng.choice(["parity", "half", "all"])
            colors = tuple(r % 2 if how == "parity" else int(r < n // 2) if how == "half" else 0
                           for r in range(n))
            keys = tuple(-r if rng.random() < 0.5 else r for r in range(n))
            comms.append(CommSpec(cid, "split", wrapped, (), colors=colors, keys=keys))
    g.comms = comms
    g.single = "single_checked" not in features and any(
        min(len(m) for m in members_of(c, n).values()) == 1 for c in comms)
    settings0 = _settings(rng, g.cut, g.single)
    g.forced = settings0.get("STRAGGLAR_ALGO", "")
    g.actions.append(("configure", settings0))

    for _ in range(steps if steps is not None else rng.randint(15, 45)):
        _step(g)                # a step may add nothing (not legal there), or a burst
    _finish(g)
    return Program(seed, n, features, g.cut, comms, g.actions, delay_p, delay_max, settings0)


def members_of(spec: CommSpec, n):
    """World ranks of a rank's communicator, for every colour: {colour: members}."""
    if spec.kind != "split":
        return {0: tuple(range(n))}
    out = {}
    for r in range(n):
        out.setdefault(spec.colors[r], []).append(r)
    return {c: tuple(sorted(rs, key=lambda r: (spec.keys[r], r))) for c, rs in out.items()}


def _comm_size_any(spec, n):
    """The smallest communicator size of this spec over the colours (ranks are < it)."""
    return min(len(m) for m in members_of(spec, n).values())


def _step(g):
    rng = g.rng
    live = g.live_comms()
    comm = rng.choice(live)
    inflight = list(g.pending)
    r = rng.random()
    if r < 0.18:                                    # a blocking call
        spec = g.spec(comm)
        auto = g.forced == "auto" or (not g.forced and spec.algorithm in ("auto", None))
        if spec.count * 8 >= g.cut and auto and g.inflight_on(comm.cid) \
                and "measure_race" not in g.features:
            spec.count = rng.randint(0, g.cut // 8 - 1)        # below the cut: no measuring
        g.actions.append(("blocking", comm.cid, g.op_id(), spec, g.late()))
    elif r < 0.24:                                  # a burst of one size class above the cut
        if g.inflight_on(comm.cid) and "measure_race" not in g.features:
            return
        race = "measure_race" in g.features and rng.random() < 0.6
        if race:
            _small_nonblocking(g, comm)
        lo = g.cut // 8
        base = rng.randint(lo, min(2 * lo, MAX_COUNT // 2))
        top = 1 << (base * 8).bit_length()         # the class ends below 2**(k+1) bytes
        dtype, op = rng.choice(DTYPES), rng.choice(OPS)
        for _ in range(rng.randint(6, 18)):
            count = rng.randint(base, max(base, (top - 1) // 8))
            api = "method" if comm.wrapped and rng.random() < 0.3 else "func"
            spec = Spec(count, dtype, op, rng.random() < 0.3, None if api == "method" else "auto",
                        None, api)
            g.actions.append(("blocking", comm.cid, g.op_id(), spec, g.late()))
            if race and rng.random() < 0.25:         # more of them, within the round
                _small_nonblocking(g, comm)
            if race and rng.random() < 0.15 and g.inflight_on(comm.cid):
                q = rng.choice(g.inflight_on(comm.cid))
                _completed(g, [q])
                g.actions.append(("complete", [q], _legal_how(g, [q], rng.choice(["wait", "test"]))))
    elif r < 0.42:                                  # Iallreduce
        spec = g.spec(comm)
        req = g.req_id()
        g.pending[req] = comm.cid
        g.cancellable.add(req)
        g.actions.append(("istart", comm.cid, g.op_id(), spec, req, g.late()))
    elif r < 0.50:                                  # a persistent request
        pid = g.req_id()
        kind = rng.choice(["ours", "ours", "ours", "native", "barrier"])
        spec = g.spec(comm) if kind != "barrier" else None
        if kind == "native":
            spec.api, spec.algorithm, spec.straggler = "mpi4py", None, None
        g.preqs[pid] = [comm.cid, kind, False]
        g.actions.append(("pinit", comm.cid, pid, kind, spec))
    elif r < 0.62:                                  # start persistent requests
        idle = [p for p, (c, kind, active) in g.preqs.items() if not active and c not in g.freed]
        if not idle:
            return
        chosen = rng.sample(idle, rng.randint(1, min(3, len(idle))))
        ours = [p for p in chosen if g.preqs[p][1] == "ours"]
        hows = ["start", "startall"]
        if "prequest_start" in g.features:
            hows += ["mpi_startall", "mpi_start"]
        how = rng.choice(hows)
        if how == "startall" and not ours:
            how = "start"
        ops = [g.op_id() for _ in chosen]
        for p in chosen:
            g.preqs[p][2] = True
            g.pending[p] = g.preqs[p][0]
            if g.preqs[p][1] == "ours":
                g.cancellable.add(p)
        g.actions.append(("pstart", chosen, ops, how, g.late()))
    elif r < 0.70:                                  # the caller's own mpi4py collectives
        kind = rng.choice(["barrier", "allreduce_obj", "iallreduce", "ibarrier"])
        if kind in ("iallreduce", "ibarrier"):
            req = g.req_id()
            g.pending[req] = comm.cid
            spec = g.spec(comm, big=False) if kind == "iallreduce" else None
            if spec:
                spec.api, spec.algorithm, spec.straggler = "mpi4py", None, None
            g.actions.append(("user", comm.cid, kind, g.op_id(), spec, req, g.late()))
        else:
            g.actions.append(("user", comm.cid, kind, g.op_id(), None, None, g.late()))
    elif r < 0.86:                                  # complete some requests
        if not inflight:
            return
        chosen = rng.sample(inflight, rng.randint(1, min(4, len(inflight))))
        how = _legal_how(g, chosen, rng.choice(["wait", "test", "waitall", "waitany", "waitsome",
                                                "testall", "testany", "testsome", "test_each"]))
        _completed(g, chosen)
        g.actions.append(("complete", chosen, how))
    elif r < 0.89:                                  # Cancel on every rank, then complete
        if "cancel" not in g.features:
            return
        ours = [q for q in inflight if q in g.cancellable]
        if not ours:
            return
        req = rng.choice(ours)
        _completed(g, [req])
        g.actions.append(("cancel", req, rng.choice(["wait", "test", "waitall"])))
    elif r < 0.94:                                  # configure() between calls
        if g.pending and "configure_pending" not in g.features:
            return
        settings = _settings(rng, g.cut, g.single)
        g.forced = settings.get("STRAGGLAR_ALGO", "")
        g.actions.append(("configure", settings))
    elif r < 0.97:                                  # Free a persistent request
        idle = [p for p, (c, kind, active) in g.preqs.items() if not active]
        if idle:
            p = rng.choice(idle)
            del g.preqs[p]
            g.actions.append(("pfree", p))
    else:                                           # Free a communicator
        if comm.cid == 0:
            return
        busy = g.inflight_on(comm.cid) or [p for p, v in g.preqs.items() if v[0] == comm.cid]
        if busy and "free_pending" not in g.features:
            return
        g.freed.add(comm.cid)
        g.actions.append(("free_comm", comm.cid))


def _small_nonblocking(g, comm):
    """The race of ``measure_race``: a small nonblocking call (native below the cut) in
    flight on ``comm`` while a burst's measuring round runs there."""
    spec = g.spec(comm, big=False)
    spec.algorithm = g.rng.choice(["native", "auto", None]) if spec.api == "func" else None
    req = g.req_id()
    g.pending[req] = comm.cid
    g.cancellable.add(req)
    g.actions.append(("istart", comm.cid, g.op_id(), spec, req, g.late()))


def _legal_how(g, reqs, how):
    """MPICH's MPI_Testall fails (MPI_ERR_IN_STATUS, every status MPI_SUCCESS or
    MPI_ERR_PENDING) over a started persistent collective of its own (Barrier_init,
    Allreduce_init) even alone: not ours to test, so Testsome stands in for it there."""
    if how == "testall" and any(g.preqs.get(q, (0, "ours"))[1] != "ours" for q in reqs):
        return "testsome"
    return how


def _completed(g, reqs):
    for q in reqs:
        g.pending.pop(q, None)
        g.cancellable.discard(q)
        if q in g.preqs:
            g.preqs[q][2] = False


def _finish(g):
    """Complete everything, free the persistent requests and the communicators."""
    if g.pending:
        rest = list(g.pending)
        g.rng.shuffle(rest)
        _completed(g, rest)
        how = _legal_how(g, rest, g.rng.choice(["wait", "waitall", "testall"]))
        g.actions.append(("complete", rest, how))
    for p in list(g.preqs):
        g.actions.append(("pfree", p))
    g.preqs.clear()
    for c in g.comms:
        if c.cid and c.cid not in g.freed:
            g.actions.append(("free_comm", c.cid))
    g.actions.append(("end",))


# --- inputs and the expected results ---------------------------------------------------

def inputs(seed, op_id, world_rank, count, dtype):
    """The input of ``world_rank`` to operation ``op_id``: small integers (exact sums)."""
    rng = np.random.default_rng([seed, op_id, world_rank])
    return rng.integers(-50, 51, size=count).astype(dtype)


def expected(seed, op_id, members, count, dtype, op):
    arrays = [inputs(seed, op_id, r, count, dtype) for r in members]
    fn = {"SUM": np.sum, "MAX": np.max, "MIN": np.min}[op]
    return fn(np.stack(arrays), axis=0).astype(dtype) if count else np.zeros(0, dtype)


def mismatch(got, want):
    """None if equal, else a short description (first index, got, want, how many)."""
    if got.shape == want.shape and np.array_equal(got, want):
        return None
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    bad = np.flatnonzero(got != want)
    i = int(bad[0])
    return f"{len(bad)} of {len(want)} elements differ; first at [{i}]: got {got[i]!r} want {want[i]!r}"


# --- the interpreter ---------------------------------------------------------------------

class Wrong(Exception):
    pass


@dataclass
class _Live:
    """A started reduction whose result is checked at completion."""
    op_id: int
    cid: int
    spec: Spec
    send: object
    recv: object
    label: str


class Runner:
    """Runs one program on this rank."""

    def __init__(self, program, report):
        from mpi4py import MPI
        import stragglar_mpi
        self.MPI, self.smpi = MPI, stragglar_mpi
        self.p = program
        self.report = report                 # report(line): a wrong result, printed at once
        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.comms = {}                      # cid -> (mpi communicator, members)
        self.requests = {}                   # req id -> request object
        self.live = {}                       # req id -> [_Live] (a persistent request's current start)
        self.preqs = {}                      # preq id -> (request, kind, spec, send, recv, cid)
        self.native_check = None             # an mpi4py persistent request, for bool() comparisons
        self.wrong = 0
        self.checked = 0
        self.done = []                       # (op id, cid, spec) for the oracle
        self.at = (0, None)

    # --- helpers
    def ctx(self, action):
        return f"seed={self.p.seed} n={self.p.n} rank={self.rank} action={action}"

    def check(self, live: _Live, where):
        members = self.comms[live.cid][1]
        s = live.spec
        want = expected(self.p.seed, live.op_id, members, s.count, s.dtype, s.op)
        got = np.asarray(live.recv)
        if SABOTAGE == "wrong" and self.rank == 0 and s.count and not self.checked:
            got = got.copy()               # the checker's own test: a wrong element
            got[-1] += 1
        why = mismatch(got, want)
        self.checked += 1
        if why is None and not s.in_place:
            sent = inputs(self.p.seed, live.op_id, self.world.Get_rank(), s.count, s.dtype)
            if not np.array_equal(live.send, sent):
                why = "the send buffer was modified"
        if why is not None:
            self.wrong += 1
            self.report(f"WRONG seed={self.p.seed} n={self.p.n} rank={self.rank} op={live.op_id} "
                        f"{live.label} comm={self.p.comms[live.cid].kind}#{live.cid} "
                        f"members={list(members)} {s} at {where}: {why}")
        self.done.append((live.op_id, live.cid, s))

    def buffers(self, op_id, spec):
        mine = inputs(self.p.seed, op_id, self.rank, spec.count, spec.dtype)
        if spec.in_place:
            return None, mine
        return mine, np.full(spec.count, -7, spec.dtype)

    def args(self, send, recv):
        return (self.MPI.IN_PLACE if send is None else send), recv

    def sleep_if_late(self, late):
        if late and late[0] == self.rank:
            time.sleep(late[1])

    def mpi_op(self, name):
        return getattr(self.MPI, name)

    # --- run
    def run(self):
        for index, action in enumerate(self.p.actions):
            self.at = (index, action)        # where a hang is (run.py prints it)
            getattr(self, "do_" + action[0])(index, *action[1:])
        self.at = (len(self.p.actions), ("after the program",))

    def do_configure(self, index, settings):
        import os
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRAGGLAR_")}
        env.update(settings)
        self.smpi.configure(env)
        if index == 0:
            self.make_comms()

    def make_comms(self):
        MPI, world, rank = self.MPI, self.world, self.rank
        for c in self.p.comms:
            if c.kind == "world":
                obj = world
            elif c.kind == "wrapped":
                obj = self.smpi.Comm(world)
            else:
                base = self.smpi.Comm(world) if c.wrapped else world
                obj = base.Dup() if c.kind == "dup" else base.Split(c.colors[rank], c.keys[rank])
            members = members_of(c, self.p.n)[c.colors[rank] if c.kind == "split" else 0]
            assert obj.Get_size() == len(members) and members[obj.Get_rank()] == rank, (c, members)
            self.comms[c.cid] = (obj, members)

    def reduce_call(self, kind, cid, op_id, spec, send, recv):
        """Blocking ("blocking"), nonblocking ("istart") or persistent ("pinit") call."""
        comm = self.comms[cid][0]
        sb, rb = self.args(send, recv)
        op = self.mpi_op(spec.op)
        smpi = self.smpi
        if spec.api == "mpi4py":
            fn = {"istart": self.MPI.Intracomm.Iallreduce, "pinit": self.MPI.Intracomm.Allreduce_init}[kind]
            return fn(comm, sb, rb, op)
        if spec.api == "method":
            return {"blocking": comm.Allreduce, "istart": comm.Iallreduce,
                    "pinit": comm.Allreduce_init}[kind](sb, rb, op)
        fn = {"blocking": smpi.Allreduce, "istart": smpi.Iallreduce, "pinit": smpi.Allreduce_init}[kind]
        return fn(comm, sb, rb, op, straggler=spec.straggler, algorithm=spec.algorithm)

    def do_blocking(self, index, cid, op_id, spec, late):
        send, recv = self.buffers(op_id, spec)
        self.sleep_if_late(late)
        self.reduce_call("blocking", cid, op_id, spec, send, recv)
        self.check(_Live(op_id, cid, spec, send, recv, "Allreduce"), f"action {index}")

    def do_istart(self, index, cid, op_id, spec, req, late):
        send, recv = self.buffers(op_id, spec)
        self.sleep_if_late(late)
        self.requests[req] = self.reduce_call("istart", cid, op_id, spec, send, recv)
        self.live[req] = _Live(op_id, cid, spec, send, recv, f"Iallreduce req#{req}")

    def do_pinit(self, index, cid, pid, kind, spec):
        comm = self.comms[cid][0]
        if kind == "barrier":
            request = comm.Barrier_init()
            send = recv = None
        else:
            send, recv = self.buffers(0, spec)
            request = self.reduce_call("pinit", cid, 0, spec, send, recv)
        self.preqs[pid] = (request, kind, spec, send, recv, cid)
        self.requests[pid] = request
        if "prequest_bool" in self.p.features and kind == "ours":
            self.compare_bool(index, pid, "after Allreduce_init")

    def compare_bool(self, index, pid, when):
        """bool() of our inactive persistent request, as an mpi4py one's (True: not null)."""
        request = self.preqs[pid][0]
        if bool(request) is not True:
            self.wrong += 1
            self.report(f"WRONG seed={self.p.seed} n={self.p.n} rank={self.rank} action={index} "
                        f"bool(our Prequest #{pid}) {when} is {bool(request)}; an inactive mpi4py "
                        "Prequest is True")

    def do_pstart(self, index, pids, ops, how, late):
        MPI = self.MPI
        for pid, op_id in zip(pids, ops):
            request, kind, spec, send, recv, cid = self.preqs[pid]
            if kind == "barrier":
                self.live[pid] = None
                continue
            fresh = inputs(self.p.seed, op_id, self.rank, spec.count, spec.dtype)
            (recv if spec.in_place else send)[:] = fresh
            if not spec.in_place:
                recv[:] = -7
            label = f"{'our' if kind == 'ours' else 'mpi4py'} Prequest #{pid} ({how})"
            self.live[pid] = _Live(op_id, cid, spec, send, recv, label)
        requests = [self.preqs[p][0] for p in pids]
        self.sleep_if_late(late)
        if how == "start":
            for r in requests:
                r.Start()
        elif how == "mpi_start":
            for r in requests:
                MPI.Prequest.Start(r)
        elif how == "startall":
            ours = next(r for r, p in zip(requests, pids) if self.preqs[p][1] == "ours")
            type(ours).Startall(requests)
        else:
            MPI.Prequest.Startall(requests)

    def do_user(self, index, cid, kind, op_id, spec, req, late):
        comm, members = self.comms[cid]
        self.sleep_if_late(late)
        if kind == "barrier":
            comm.Barrier()
        elif kind == "allreduce_obj":
            got = comm.allreduce(op_id * 10 + self.rank)
            want = sum(op_id * 10 + r for r in members)
            self.checked += 1
            if got != want:
                self.wrong += 1
                self.report(f"WRONG seed={self.p.seed} rank={self.rank} op={op_id} mpi4py allreduce "
                            f"of an object: got {got} want {want}")
        elif kind == "ibarrier":
            self.requests[req] = comm.Ibarrier()
            self.live[req] = None
        else:
            send, recv = self.buffers(op_id, spec)
            self.requests[req] = self.reduce_call("istart", cid, op_id, spec, send, recv)
            self.live[req] = _Live(op_id, cid, spec, send, recv, f"mpi4py Iallreduce req#{req}")

    def finished(self, req, index):
        live = self.live.pop(req, None)
        if live is not None:
            self.check(live, f"action {index}")
        if req not in self.preqs:
            self.requests.pop(req, None)
        elif "prequest_bool" in self.p.features and self.preqs[req][1] == "ours":
            self.compare_bool(index, req, "after its completion")

    def do_complete(self, index, reqs, how):
        objs = [self.requests[q] for q in reqs]
        statuses = [self.MPI.Status() for _ in objs]
        for st in statuses:
            st.Set_error(0)
        try:
            self.complete(index, objs, how, statuses)
        except self.MPI.Exception as exc:
            # mpi4py's Waitall & co. raise MPI.Exception for an error of ours; our Wait
            # raises what it really was
            errors = []
            for q, o, st in zip(reqs, objs, statuses):
                kind = type(self.requests[q]).__module__ + "." + type(self.requests[q]).__name__
                call = getattr(o, "_call", None)
                errors.append(f"req#{q} ({kind}) status error {st.Get_error()} "
                              f"({self.MPI.Get_error_string(st.Get_error())!r})"
                              + (f" its operation raised {call.error!r}" if call and call.error else ""))
            raise RuntimeError(f"{how} over {len(objs)} requests raised {exc!r} "
                               f"(code {exc.Get_error_code()}): " + "; ".join(errors)) from exc
        for q in reqs:
            self.finished(q, index)

    def complete(self, index, objs, how, statuses):
        MPI = self.MPI
        if how == "wait":
            for o in objs:
                o.Wait()
        elif how == "test":
            for o in objs:
                self.test_loop(lambda: o.Test())
        elif how == "test_each":          # Test each in turn until all are done
            left = list(objs)
            while left:
                left = [o for o in left if not o.Test()]
                if left:
                    time.sleep(0.0005)
        elif how == "waitall":
            MPI.Request.Waitall(objs, statuses)
        elif how == "testall":
            self.test_loop(lambda: MPI.Request.Testall(objs, statuses))
        elif how == "waitany":
            for _ in objs:
                i = MPI.Request.Waitany(objs, statuses[0])
                assert i != MPI.UNDEFINED, (self.ctx(index), "Waitany: no active request left")
            assert MPI.Request.Waitany(objs) == MPI.UNDEFINED, self.ctx(index)
        elif how == "testany":
            for _ in objs:
                self.test_loop(lambda: MPI.Request.Testany(objs, statuses[0])[1])
        elif how == "testsome":
            done = 0
            while done < len(objs):
                got = MPI.Request.Testsome(objs, statuses)
                assert got is not None, (self.ctx(index), "Testsome: no active request left")
                done += len(got)
                if done < len(objs):
                    time.sleep(0.0005)
        elif how == "waitsome":
            done = 0
            while done < len(objs):
                got = MPI.Request.Waitsome(objs, statuses)
                assert got, (self.ctx(index), "Waitsome returned nothing with requests active")
                done += len(got)

    def test_loop(self, test):
        while not test():
            time.sleep(0.0005)            # never spin: a 2-core machine is shared

    def do_cancel(self, index, req, how):
        MPI = self.MPI
        request = self.requests[req]
        request.Cancel()
        status = MPI.Status()
        if how == "wait":
            request.Wait(status)
        elif how == "test":
            while not request.Test(status):
                time.sleep(0.0005)
        else:
            statuses = [MPI.Status()]
            MPI.Request.Waitall([request], statuses)
            status = statuses[0]
        if status.Is_cancelled():
            self.wrong += 1
            self.report(f"WRONG seed={self.p.seed} n={self.p.n} rank={self.rank} action={index} "
                        f"req#{req}: Is_cancelled() after Cancel (a started collective must complete)")
        self.finished(req, index)

    def do_pfree(self, index, pid):
        request = self.preqs.pop(pid)[0]
        self.requests.pop(pid, None)
        request.Free()

    def do_free_comm(self, index, cid):
        self.comms[cid][0].Free()

    def do_end(self, index):
        if SABOTAGE == "hang" and self.rank == self.p.n - 1:
            threading.Event().wait()       # the hang machinery's own test: the others wait below
        if SABOTAGE == "error" and self.rank == 0:
            raise RuntimeError("sabotage: an error on rank 0")
        assert not self.live, (self.ctx(index), "left in flight", list(self.live))

    # --- the oracle: mpi4py's Allreduce on the same inputs
    def oracle(self):
        """Check ``expected`` (our local formula) against mpi4py's own Allreduce on native
        communicators of the same members: the checker itself is checked."""
        MPI, world = self.MPI, self.world
        natives = {}
        for c in self.p.comms:
            color = c.colors[self.rank] if c.kind == "split" else 0
            key = self.comms[c.cid][1].index(self.rank)
            natives[c.cid] = MPI.Intracomm.Split(world, color, key)
        bad = 0
        # every rank walks the same list: the oracle's collectives match
        for op_id, cid, s in self.done:
            mine = inputs(self.p.seed, op_id, self.rank, s.count, s.dtype)
            out = np.zeros(s.count, s.dtype)
            MPI.Intracomm.Allreduce(natives[cid], mine, out, self.mpi_op(s.op))
            why = mismatch(expected(self.p.seed, op_id, self.comms[cid][1], s.count, s.dtype, s.op), out)
            if why:
                bad += 1
                self.report(f"ORACLE seed={self.p.seed} rank={self.rank} op={op_id}: the local "
                            f"expected value differs from mpi4py's Allreduce: {why}")
        for c in natives.values():
            c.Free()
        return bad


def make_delay(program, rank):
    """The progress thread's delay hook of ``program`` on ``rank`` (None: off)."""
    if program.delay_p <= 0:
        return None
    rng = random.Random(f"stragglar-fuzz-delay-{program.seed}-{program.n}-{rank}")
    p, most = program.delay_p, program.delay_max

    def delay(point, op):
        if rng.random() < p:
            time.sleep(rng.uniform(0, most))
    return delay
