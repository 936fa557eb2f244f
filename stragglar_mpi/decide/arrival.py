"""Who arrived when: arrival notices by eager point-to-point in O(log n) messages a rank.

A message that small goes eagerly: the send completes at the sender and the data
waits at the receiver without either side's progress, so a rank that is late,
outside MPI, holds up nobody's message (docs/ARRIVAL.md has the measurements).
Nothing is ever forwarded by a rank that might be the late one.  This is the table of
communicators of ``STRAGGLAR_ARRIVAL_GROUPS`` ranks or more (16 by default); smaller
ones send a notice to every rank (decide/notices.py: fewer rounds of latency there).
Each sequence of calls (core/sequences.py: the blocking calls, each nonblocking lane) has a
table of its own, on the duplicate its communicator's tables share, with a tag of its
own (core/tags.py ``arrival``): every message of a sequence has that tag, its kind
inside.  A table takes its messages in by matched probes (no receive from any rank
stays posted), and whoever drives a call waits until one can be probed (core/steps.py
``Wait``): the table itself never waits, its waits are generators.

- Groups: the ranks in node order, cut into groups of about sqrt(n) (at least 2).
  Each group has two *aggregators*: its two members that came first in the previous
  record (the lowest ranks at first), so a persistent straggler is never one, and a
  late one leaves the other.  The *coordinator* is the first arrival of the previous
  record (rank 0 at first).
- Notices: on entering a tracked call, a rank sends a notice ``(call, token, time)``
  to its group's aggregators, the time being when it entered the call, on rank 0's
  clock (``clock.offsets``): at most 2 messages.
- Roles ("arrival"): while the ranks wait for the roles, each aggregator reports its
  group to the coordinator once all but one member are in (naming the one missing)
  and once all are: at most 2 messages.  The coordinator takes, per group, what
  either aggregator said; once all but one rank of the communicator are in it names
  the one missing (all at once: the latest by time) and sends that down a binary
  tree over the other ranks (built once the straggler is known, so the straggler
  forwards nothing), plus once to the straggler, who finds it waiting.  A late
  aggregator: its partner reports.  A late coordinator: the call still gets the
  right roles, but the early ranks wait for it (a persistent straggler never is
  one; a moving one about one call in n); one that finds the roles decided on
  arrival asks the missing rank's aggregators first (its reports may be older).
- Record: after its plan (every rank has entered the call then), each rank passes
  the times around in ceil(log2 n) rounds (each round: what it holds to rank
  r - 2^k, from rank r + 2^k), so every rank holds every time and builds the same
  ``Arrival(order, times)``, read by the next tracked call.
- Missing ranks (a timeout): each aggregator sends the members it heard from to
  every other aggregator and, once it has every group, the union to its members:
  every rank that waited names the same missing ones (two missing aggregators of
  one group: that group's members are not known; they are named too).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from ..core import config as _config
from ..core import tags
from ..core.steps import Wait
from .clock import stamp


_DRAIN = 8              # empty tests before a thorough pump ends
_KEEP = 3               # calls whose messages and state are kept (current, previous, one more)


@dataclass(frozen=True)
class Arrival:
    """One finished call, as every rank sees it: ``last``, the rank that came last, and
    ``gap``, how long after the one before it (seconds), are worked out once here, since
    every later decision reads them."""
    order: tuple        # ranks in arrival order
    times: tuple        # their arrival times on rank 0's clock, same order
    last: int = field(init=False)
    gap: float = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "last", self.order[-1])
        object.__setattr__(self, "gap", self.times[-1] - self.times[-2] if len(self.times) > 1 else 0.0)


def coordinator(previous, n):
    """The rank that decides the roles of the next call: the first to arrive last time."""
    return 0 if previous is None else previous.order[0]


def groups_of(n, node_of=None):
    """The ranks in node order cut into groups of ceil(sqrt(n)); none of one rank."""
    order = sorted(range(n), key=lambda r: (node_of[r] if node_of else 0, r))
    size = max(2, math.isqrt(n - 1) + 1) if n > 1 else 1
    chunks = [order[i:i + size] for i in range(0, n, size)]
    if len(chunks) > 1 and len(chunks[-1]) < 2:
        last = chunks.pop()
        chunks[-1] += last
    return tuple(tuple(sorted(c)) for c in chunks)


def aggregators_of(groups, previous):
    """Each group's two aggregators: its members that came first in ``previous``."""
    if previous is None:
        return tuple(g[:2] for g in groups)
    place = {r: i for i, r in enumerate(previous.order)}
    return tuple(tuple(sorted(g, key=place.__getitem__)[:2]) for g in groups)


def tree_children(rank, root, straggler, n):
    """``rank``'s children in the binary tree over every rank but ``straggler``: the
    root first, then the others in rank order (position p feeds 2p+1 and 2p+2)."""
    skip = sorted({root, straggler})

    def position(r):
        return 0 if r == root else 1 + r - sum(s < r for s in skip)

    def at(q):
        v = q - 1
        for s in skip:
            if v >= s:
                v += 1
        return v

    size = n - (1 if straggler != root else 0)
    if rank == straggler and rank != root:
        return []
    p = position(rank)
    return [at(q) for q in (2 * p + 1, 2 * p + 2) if q < size]


class _Call:
    """What this rank holds of one tracked call."""

    def __init__(self, seq):
        self.seq = seq
        self.arrived = False
        self.mine = 0.0              # this rank's arrival time
        self.aggregators = None      # per group, set on arrival
        self.coordinator = None
        self.heard = {}              # notices: rank -> time
        self.reports = {}            # aggregator -> (missing or -1, latest rank, its time)
        self.reported = set()        # what this aggregator reported: 1 (all but one), 0 (all)
        self.decision = None
        self.pieces = {}             # round -> the times received in it
        self.queries = []            # (coordinator, member) it asked this aggregator about
        self.asked = {}              # member -> the aggregators this coordinator asked
        self.answers = {}            # (aggregator, member) -> (heard, time)
        self.confirmed = {}          # member -> time: present, as an aggregator answered
        self.views = {}              # group -> ranks some aggregator heard from (naming)
        self.named = None            # ranks known to have arrived (naming), once settled
        self.sent = 0                # arrival messages this rank sent for this call


class GroupTable:
    """The arrival table of one sequence of a communicator of STRAGGLAR_ARRIVAL_GROUPS
    ranks or more; ``shared``: what the communicator's tables share (decide/roles.py
    ``Tables``: the duplicate, the clock offset, the token, the nodes)."""
    protocol = "groups"

    def __init__(self, shared, sequence=0):
        self.comm, self.offset, self.token = shared.comm, shared.offset, shared.token
        self.n, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        self.tag = tags.arrival(sequence)
        self.seq = 0
        self.groups = groups_of(self.n, shared.node_of)
        self.group_of = {r: i for i, g in enumerate(self.groups) for r in g}
        self._calls = {}
        self._records = {}              # seq -> Arrival
        self._latest = None             # the newest record (the next call's roles follow it)
        self._sends = []                # (request, buffer) still in flight
        self._status = MPI.Status()
        self.sent_total = 0             # arrival messages this rank sent in this sequence
        self.coordinator = 0
        self.place = 0

    def now(self):
        """This rank's time on rank 0's clock."""
        return MPI.Wtime() - self.offset

    # --- one call -----------------------------------------------------------------------

    def arrive(self, deadline=0.0, entry=None):
        """Generator: enter this call: send this rank's notice, stamped with ``entry``
        (the MPI_Wtime at which the call was entered; None: now) on rank 0's clock, to
        its group's aggregators; returns how many notices of this call this rank already
        held."""
        t = stamp((MPI.Wtime() if entry is None else entry) - self.offset)
        call = self._call(self.seq)
        call.arrived, call.mine = True, t
        call.aggregators = aggregators_of(self.groups, self._latest)
        call.coordinator = self.coordinator = coordinator(self._latest, self.n)
        for a in call.aggregators[self.group_of[self.rank]]:
            if a != self.rank:
                self._send(call, [t], tags.NOTICE, a)      # first: nobody waits for ours
        self._pump(thorough=True)      # what came before this rank: all of it
        self.place = len(call.heard)
        return self.place
        yield  # pragma: no cover  (a generator, as every table's arrive)

    def record_before(self, deadline=0.0):
        """Generator (that waits for nothing): the newest record (the previous tracked
        call's, once it completed)."""
        return self._latest
        yield  # pragma: no cover

    def previous(self):
        """The record of the previous tracked call, or None (before the first)."""
        return self._records.get(self.seq - 1)

    def entered(self):
        """{rank: when it entered the current call (rank 0's clock)} for the notices this
        rank holds."""
        self._pump()
        return dict(self._call(self.seq).heard)

    def heard(self):
        """Ranks (other than this one) known to have entered the current call."""
        self._pump()
        call = self._call(self.seq)
        known = set(call.heard)
        for g, missing in self._group_states(call).items():
            if missing is not None:
                known.update(r for r in self.groups[g] if r not in missing)
        known.discard(self.rank)
        return known

    def straggler(self, deadline=0.0):
        """Generator: the rank that arrives last in this call, as the coordinator saw
        it; None if ``deadline`` (an MPI_Wtime, 0 = never) passes first."""
        call = self._calls[self.seq]
        mine = call.aggregators[self.group_of[self.rank]]
        first, verify = True, False
        while True:
            self._pump()
            if call.decision is not None:
                break
            if self.rank in mine:
                self._report(call)
                self._answer(call)
            if self.rank == call.coordinator:
                last, named_missing = self._decide(call)
                if first:           # decidable on arrival: this rank came late, the reports
                    first, verify = False, last is not None     # may be older than it
                if named_missing and verify and not self._verified(call, last):
                    last = None
                if last is not None:
                    call.decision = last
                    if last != self.rank:
                        self._send(call, [last], tags.DECISION, last)
                    break
            if not (yield self._next(deadline)):
                return None
        for child in tree_children(self.rank, call.coordinator, call.decision, self.n):
            self._send(call, [call.decision], tags.DECISION, child)
        return call.decision

    def finish(self):
        """This rank is done with the call's roles (its plan follows)."""
        self.seq += 1
        for old in [s for s in self._calls if s < self.seq - _KEEP]:
            del self._calls[old]
        self._sends = [(req, buf) for req, buf in self._sends if not req.Test()]

    def settle(self, deadline=0.0):
        """Generator: after the plan of the last call: pass the times around
        (ceil(log2 n) rounds) and keep the record.  False if ``deadline`` passes first."""
        seq = self.seq - 1
        call = self._calls.get(seq)
        if call is None or not call.arrived:
            return True
        n, r = self.n, self.rank
        have = [call.mine]                          # times of r, r+1, ... (mod n)
        k, dist = 0, 1
        while dist < n:
            count = min(dist, n - dist)
            self._send(call, [k] + have[:count], tags.RECORD, (r - dist) % n)
            while k not in call.pieces:
                self._pump()
                if k in call.pieces:
                    break
                if not (yield self._next(deadline)):
                    return False
            have += list(call.pieces.pop(k)[:count])
            k, dist = k + 1, 2 * dist
        times = {(r + i) % n: have[i] for i in range(n)}
        order = tuple(sorted(times, key=lambda q: (times[q], q)))
        self._latest = self._records[seq] = Arrival(order, tuple(times[q] for q in order))
        for old in [s for s in self._records if s < seq - 1]:
            del self._records[old]
        return True

    def sent_in(self, seq):
        """Arrival messages this rank sent for call ``seq``."""
        call = self._calls.get(seq)
        return call.sent if call is not None else 0

    # --- the aggregators and the coordinator ------------------------------------------

    def _report(self, call):
        """On an aggregator: tell the coordinator when all but one, then all, of the
        group are in."""
        g = self.group_of[self.rank]
        missing = [m for m in self.groups[g] if m != self.rank and m not in call.heard]
        if len(missing) > 1 or len(missing) in call.reported or 0 in call.reported:
            return
        call.reported.add(len(missing))
        if self.rank == call.coordinator:
            return                              # it reads its own group directly
        latest = self._latest_of(call, [m for m in self.groups[g] if m not in missing])
        self._send(call, [missing[0] if missing else -1, latest, self._time(call, latest)],
                   tags.REPORT, call.coordinator)

    def _answer(self, call):
        """On an aggregator: answer the coordinator's questions (has this member come?)."""
        for src, x in call.queries:
            self._send(call, [x, float(x in call.heard), call.heard.get(x, 0.0)], tags.ANSWER, src)
        call.queries = []

    def _verified(self, call, x):
        """On a coordinator that came late: whether ``x``, missing in reports that may be
        older than this rank's arrival, is still missing at the aggregators of its group
        (who are in the call: they reported).  Asks them once; False until all answered,
        or once one has heard from ``x`` (then the group's state drops it)."""
        asked = call.asked.get(x)
        if asked is None:
            asked = call.asked[x] = [a for a in call.aggregators[self.group_of[x]] if a not in (x, self.rank)]
            for a in asked:
                self._send(call, [x], tags.QUERY, a)
        got = [call.answers.get((a, x)) for a in asked]
        here = [ans[1] for ans in got if ans is not None and ans[0]]
        if here:
            call.confirmed[x] = here[0]
            return False
        return all(ans is not None for ans in got)

    def _time(self, call, r):
        return call.mine if r == self.rank else call.heard[r]

    def _latest_of(self, call, present):
        return max(present, key=lambda r: (self._time(call, r), r))

    def _group_states(self, call):
        """group -> the ranks it may still miss (a set: what every source says is missing
        there), or None when nothing is known of it; and the latest arrival per group."""
        states = {}
        for src, (missing, _, _) in call.reports.items():
            g = self.group_of[src]
            said = set() if missing < 0 else {missing}
            states[g] = said if g not in states else states[g] & said
        g = self.group_of[self.rank]
        if call.aggregators is not None and self.rank in call.aggregators[g] and call.arrived:
            local = {m for m in self.groups[g] if m != self.rank and m not in call.heard}
            states[g] = local if g not in states else states[g] & local
        for x in call.confirmed:
            if self.group_of[x] in states:
                states[self.group_of[x]] = states[self.group_of[x]] - {x}
        return states

    def _decide(self, call):
        """On the coordinator: (the one rank missing once n-1 are in, True); when all
        are, (the latest by (time, rank), False); (None, False) while two or more are
        missing (or unknown)."""
        states = self._group_states(call)
        if len(states) < len(self.groups):
            return None, False
        missing = set().union(*states.values())
        if len(missing) > 1:
            return None, False
        if missing:
            return missing.pop(), True
        latest = []
        for src, (_, rank, t) in call.reports.items():
            latest.append((t, rank))
        g = self.group_of[self.rank]
        if self.rank in call.aggregators[g]:
            r = self._latest_of(call, self.groups[g])
            latest.append((self._time(call, r), r))
        latest.append((call.mine, self.rank))
        latest += [(t, x) for x, t in call.confirmed.items()]
        return max(latest)[1], False

    # --- missing ranks ----------------------------------------------------------------

    def absent(self, seq, grace=None):
        """Generator: ranks that have not entered call ``seq``, the same on every rank
        that waited (each takes part in a short exchange: call it on every waiting rank)."""
        call = self._calls.get(seq)
        if call is None or not call.arrived:
            return []
        if call.named is None:
            yield from self._name(call, self._grace() if grace is None else grace)
        return [r for r in range(self.n) if r not in call.named]

    @staticmethod
    def _grace():
        timeout = _config.current().timeout
        return min(1.0, max(0.2, timeout)) if timeout else 0.5

    def _name(self, call, grace):
        """Generator, once a wait for the roles has timed out: the ranks missing from
        ``call``, agreed with the other aggregators (``grace``: how long to wait for them)."""
        self._pump()
        g = self.group_of[self.rank]
        aggregating = self.rank in call.aggregators[g]
        if aggregating:
            view = [self.rank] + [m for m in self.groups[g] if m in call.heard]
            call.views.setdefault(g, set()).update(view)
            for pair in call.aggregators:
                for a in pair:
                    if a != self.rank:
                        self._send(call, view, tags.VIEW, a)
        start = MPI.Wtime()
        while call.named is None:
            self._pump()
            if call.named is not None:
                break
            late = MPI.Wtime() - start
            if aggregating and (len(call.views) == len(self.groups) or late > grace / 2):
                present = set().union(*call.views.values())
                call.named = present
                for m in self.groups[g]:
                    if m not in call.aggregators[g]:
                        self._send(call, sorted(present), tags.NAMED, m)
                break
            if late > grace:
                known = {self.rank} | set(call.heard)
                if call.decision is not None:
                    known |= {r for r in range(self.n) if r != call.decision}
                call.named = known
                break
            yield self._next(start + (grace / 2 if aggregating else grace))

    # --- messages ---------------------------------------------------------------------

    def _call(self, seq):
        call = self._calls.get(seq)
        if call is None:
            call = self._calls[seq] = _Call(seq)
        return call

    def _send(self, call, payload, kind, dest):
        buf = np.array([call.seq, self.token, kind] + list(payload), np.float64)
        self._sends.append((self.comm.Isend(buf, dest, self.tag), buf))
        call.sent += 1
        self.sent_total += 1

    def _next(self, until):
        """The step that waits for the next message of this sequence (or ``until``)."""
        return Wait((), until, probe=(self.comm, self.tag))

    def _pump(self, thorough=False):
        """Take in every message of this sequence that is here (matched probes, any
        source); ``thorough``: probe a few more times once none comes (one probe may
        move only part of what waits in a socket)."""
        status, empty = self._status, 0
        while True:
            msg = self.comm.Improbe(MPI.ANY_SOURCE, self.tag, status)
            if msg is None:
                empty += 1
                if not thorough or empty > _DRAIN:
                    return
                continue
            buf = np.empty(status.Get_count(MPI.DOUBLE), np.float64)
            msg.Recv(buf)
            if len(buf) >= 3:
                self._take(status.Get_source(), int(buf[2]), buf)

    def _take(self, src, tag, buf):
        if buf[1] != self.token:
            return                      # left over from a freed duplicate: not ours
        seq = int(buf[0])
        if seq > self.seq + 1:
            raise RuntimeError(f"arrival message of call {seq} from rank {src} in call {self.seq}: "
                               "ranks called Allreduce in different sequences")
        if seq < self.seq - _KEEP:
            return
        call, body = self._call(seq), buf[3:]
        if tag == tags.NOTICE:
            call.heard[src] = float(body[0])
        elif tag == tags.REPORT:
            old = call.reports.get(src)
            if old is None or old[0] >= 0:      # "all in" supersedes "all but one"
                call.reports[src] = (int(body[0]), int(body[1]), float(body[2]))
        elif tag == tags.DECISION:
            if call.decision is None:
                call.decision = int(body[0])
        elif tag == tags.RECORD:
            call.pieces[int(body[0])] = body[1:]
        elif tag == tags.QUERY:
            call.queries.append((src, int(body[0])))
        elif tag == tags.ANSWER:
            call.answers[(src, int(body[0]))] = (bool(body[1]), float(body[2]))
        elif tag == tags.VIEW:
            call.views.setdefault(self.group_of[src], set()).update(int(x) for x in body)
        elif tag == tags.NAMED:
            if call.named is None:
                call.named = {int(x) for x in body}

    def free(self):
        """Before the shared duplicate is freed: nothing of this table stays posted."""
        for req, _ in self._sends:
            if not req.Test():
                req.Free()      # completes on its own; nobody waits for it
        self._sends = []
