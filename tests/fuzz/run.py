"""Run seeded random legal MPI programs over stragglar_mpi (tests/fuzz/programs.py).

    python tests/fuzz/run.py --np 3 --seeds 0:2000             # thousands, with progress
    python tests/fuzz/run.py --np 4 --seeds 17                 # one seed again
    python tests/fuzz/run.py --np 3 --seeds 0:100 --features safe     # without the known-broken
    SMPI_FUZZ_SKIP=cancel,free_pending python tests/fuzz/run.py ...   # the same, by name

This process starts ``mpiexec -n NP`` (tests/launcher.py) over a batch of seeds (many
programs per launch: start-up costs seconds); every rank generates each program from
its seed alone and runs it.  A wrong result prints the seed, the operation, got vs
want, and the program goes on; an exception ends the launch (every rank aborts); a
program still running after --program-timeout seconds is a hang: every rank writes
its threads' stacks (faulthandler), then the job ends, and the stacks are printed.
After an error or a hang, the launch goes on from the next seed.  The summary line:
``fuzz: programs P ok O wrong W errors E hangs H seconds S``, then one rerun command
per failing seed (the library state that earlier programs of the same launch left on
COMM_WORLD is part of a program's history: if one seed alone passes, rerun its batch,
the command printed after it).  Exit status 1 if anything failed.
"""
from __future__ import annotations

import argparse
import faulthandler
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(TESTS))

import programs  # noqa: E402

GRACE = 4.0       # seconds between the stacks' dump and the rank's exit on a hang


def seed_range(text):
    """"A:B" (B excluded), "A" or "A,B,C"."""
    if ":" in text:
        a, b = text.split(":")
        return list(range(int(a), int(b)))
    return [int(s) for s in text.split(",") if s.strip()]


def seeds_text(seeds):
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}:{seeds[-1] + 1}"
    return ",".join(map(str, seeds))


def features_from(text, skip=None):
    chosen = programs.parse_features(text)
    skip = os.environ.get("SMPI_FUZZ_SKIP", "") if skip is None else skip
    for name in (s.strip() for s in skip.split(",")):
        if name:
            programs.parse_features(name)            # a typo raises
            chosen = chosen - {name}
    return chosen


# --- on every rank, under mpiexec -----------------------------------------------------

def child(args):
    from mpi4py import MPI
    import stragglar_mpi  # noqa: F401
    from stragglar_mpi.run.engine import ENGINE

    world = MPI.COMM_WORLD
    rank, n = world.Get_rank(), world.Get_size()
    features = programs.parse_features(args.features)
    lock = threading.Lock()

    def say(line):
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    stacks = open(os.path.join(args.stacks, f"rank{rank}.txt"), "w") if args.stacks else sys.stderr
    for seed in seed_range(args.seeds):
        program = programs.generate(seed, n, features, args.steps or None)
        if rank == 0:
            say(f"FUZZ begin {seed} {program.describe()}")
        if args.stacks:
            stacks.seek(0)
            stacks.truncate()
            stacks.write(f"seed {seed}, rank {rank}: every thread, {args.program_timeout:g} s "
                         "into the program\n")
            stacks.flush()
        faulthandler.dump_traceback_later(args.program_timeout, file=stacks)
        runner = programs.Runner(program, say)
        timer = threading.Timer(args.program_timeout + GRACE, _hang, (say, seed, rank, n, args, runner))
        timer.daemon = True
        timer.start()
        ENGINE.delay = programs.make_delay(program, rank)
        t0 = time.monotonic()
        bad = 0
        try:
            runner.run()
            ENGINE.delay = None
            bad = runner.oracle() if args.oracle else 0
        except BaseException as exc:
            ENGINE.delay = None
            say(f"ERROR seed={seed} n={n} rank={rank}: {type(exc).__name__}: {exc}\n"
                + "".join(traceback.format_exc()))
            time.sleep(1.0)          # the other ranks may say theirs
            world.Abort(3)
            os._exit(3)
        took = time.monotonic() - t0
        wrong = world.allreduce(runner.wrong + bad)     # under the timer: a rank that hangs
        checked = world.allreduce(runner.checked)        # keeps the others here, and they dump too
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()
        if rank == 0:
            say(f"FUZZ {'ok' if not wrong else 'wrong'} {seed} {took:.2f} checked={checked}")
    if rank == 0:
        say("FUZZ done")


def _hang(say, seed, rank, n, args, runner):
    index, action = runner.at
    say(f"HANG seed={seed} n={n} rank={rank}: still running after {args.program_timeout:g} s, "
        f"in action {index} {action}")
    sys.stderr.flush()
    os._exit(4)


# --- the driver -------------------------------------------------------------------------

@dataclass
class Failure:
    seed: int
    kind: str           # wrong | error | hang
    detail: str
    batch: list

    def symptom(self):
        """The first line that says what went wrong (for an error or a hang, its own kind)."""
        lines = [x.strip() for x in self.detail.splitlines()]
        own = {"hang": ("HANG",), "error": ("ERROR",)}.get(self.kind, ())
        for starts in (own, ("WRONG", "ERROR", "HANG", "ORACLE")):
            for line in lines:
                if starts and line.startswith(starts):
                    return line[:400]
        return self.detail.strip().splitlines()[0][:400] if self.detail.strip() else "(no output)"


@dataclass
class Summary:
    np: int
    programs: int = 0
    ok: int = 0
    failures: list = field(default_factory=list)
    seconds: float = 0.0

    def count(self, kind):
        return sum(1 for f in self.failures if f.kind == kind)

    def line(self):
        return (f"fuzz: np {self.np} programs {self.programs} ok {self.ok} wrong {self.count('wrong')} "
                f"errors {self.count('error')} hangs {self.count('hang')} seconds {self.seconds:.1f}")


def rerun_command(np, seeds, features, args):
    words = [sys.executable, str(HERE / "run.py"), "--np", str(np), "--seeds", seeds_text(seeds),
             "--features", programs.features_text(features)]
    if args.steps:
        words += ["--steps", str(args.steps)]
    return " ".join(shlex.quote(w) for w in words)


def launch(np, seeds, features, args, echo):
    """One mpiexec over ``seeds``: {seed: ("ok"|"wrong", lines)}, the failed seed's
    Failure (or None) and the output."""
    import launcher
    with tempfile.TemporaryDirectory(prefix="smpi-fuzz-") as stacks:
        argv = [sys.executable, str(HERE / "run.py"), "--child", "--seeds", seeds_text(seeds),
                "--features", programs.features_text(features),
                "--program-timeout", str(args.program_timeout), "--stacks", stacks,
                "--steps", str(args.steps)]
        if args.oracle:
            argv.append("--oracle")
        hard = int(args.program_timeout * 3 + 30 + 5 * len(seeds))     # mpiexec's own kill, last
        cmd = launcher.command(np, argv, hard)
        env = launcher.environment(hard)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=TESTS, start_new_session=True)
        lines = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put(None)],
                                  daemon=True)
        reader.start()
        out, done, current, killed = [], {}, None, False
        last = time.monotonic()
        details = {}
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                if time.monotonic() - last > args.program_timeout + GRACE + 30:
                    killed = True           # nothing for too long: the hang kept every rank
                    stop(proc)
                    break
                continue
            if line is None:
                break
            last = time.monotonic()
            out.append(line)
            words = line.split()
            if line.startswith("FUZZ begin"):
                current = int(words[2])
                details.setdefault(current, [])
            elif line.startswith("FUZZ ok") or line.startswith("FUZZ wrong"):
                done[int(words[2])] = (words[1], float(words[3]))
                echo(int(words[2]), words[1], float(words[3]), details.get(int(words[2]), []))
            elif line.startswith(("WRONG", "ORACLE")) and current is not None:
                details[current].append(line.rstrip())
        proc.wait()
        text = "".join(out)
        failure = None
        missing = [s for s in seeds if s not in done]
        if missing:
            seed = missing[0]
            kind = "hang" if (killed or "HANG seed=" in text) else "error"
            dumps = "".join(f"\n--- {p.stem}: its threads' stacks ---\n{p.read_text()}"
                            for p in sorted(Path(stacks).glob("rank*.txt")) if p.read_text().strip())
            begun = text.rfind(f"FUZZ begin {seed} ")
            tail = text[begun:] if begun >= 0 else text[-20000:]
            failure = Failure(seed, kind, f"(mpiexec rc={proc.returncode}{', killed' if killed else ''})\n"
                              + tail[-30000:] + (dumps if kind == "hang" else ""), list(seeds))
        return done, details, failure


def stop(proc):
    """End a launch: SIGTERM first, so that mpiexec ends the ranks it started (they run in
    sessions of their own), then SIGKILL."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def campaign(np, seeds, features, args, out=print):
    """Every seed at ``np`` ranks, in launches of ``args.batch`` programs."""
    summary = Summary(np)
    t0 = time.monotonic()
    total = len(seeds)

    def echo(seed, verdict, took, lines):
        summary.programs += 1
        if verdict == "ok":
            summary.ok += 1
        if not args.quiet or verdict != "ok":
            out(f"[{summary.programs:>5}/{total}] np {np} seed {seed} {verdict} {took:.2f} s")
        elif summary.programs % 100 == 0:         # --quiet: a line every 100 programs
            out(f"[{summary.programs:>5}/{total}] np {np} {summary.ok} ok, {len(summary.failures)} "
                f"failed so far, {time.monotonic() - t0:.0f} s")
        for line in lines[:3]:
            out("    " + line)
        if len(lines) > 3:
            out(f"    ... and {len(lines) - 3} more such lines")

    remaining = list(seeds)
    while remaining:
        batch = remaining[:args.batch]
        done, details, failure = launch(np, batch, features, args, echo)
        for seed in batch:
            if seed in done and done[seed][0] == "wrong":
                summary.failures.append(Failure(seed, "wrong", "\n".join(details.get(seed, [])), batch))
        if failure is not None:
            summary.programs += 1
            summary.failures.append(failure)
            out(f"[{summary.programs:>5}/{total}] np {np} seed {failure.seed} {failure.kind.upper()}")
            if args.show > 0:
                out("\n".join("    " + x for x in failure.detail.splitlines()[-args.show:]))
            batch = batch[:batch.index(failure.seed) + 1]
        remaining = remaining[len(batch):]
        if args.stop_after and len(summary.failures) >= args.stop_after:
            break
    summary.seconds = time.monotonic() - t0
    return summary


def report(summary, features, args, out=print):
    out(summary.line())
    for f in sorted(summary.failures, key=lambda f: f.seed):
        first = f.batch[0]
        alone = rerun_command(summary.np, [f.seed], features, args)
        out(f"FAILED np {summary.np} seed {f.seed} ({f.kind}): {f.symptom()}\n    rerun: {alone}")
        if first != f.seed:
            out(f"    with its launch's history: "
                f"{rerun_command(summary.np, list(range(first, f.seed + 1)), features, args)}")


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] + " Every result is checked "
                                "exactly; hangs print every rank's stacks.",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="features: " + ", ".join(programs.FEATURES)
                                + f"; 'safe' leaves out the known-broken ({', '.join(programs.BROKEN)}). "
                                "SMPI_FUZZ_SKIP=a,b switches features off by name.")
    p.add_argument("--np", type=int, nargs="+", default=[3], help="world size(s) (default 3)")
    p.add_argument("--seeds", default="0:100", help="A:B (B excluded), A, or A,B,C (default 0:100)")
    p.add_argument("--features", default="all",
                   help="all (default), safe, none, or a comma list; -name removes one")
    p.add_argument("--steps", type=int, default=0,
                   help="generator steps per program (default 0: 15-45, drawn); small values give small repros")
    p.add_argument("--batch", type=int, default=100, help="programs per mpiexec launch (default 100)")
    p.add_argument("--program-timeout", type=float, default=60.0,
                   help="seconds after which a program is a hang (default 60)")
    p.add_argument("--oracle", action="store_true",
                   help="also check the local expected values against mpi4py's Allreduce after each program")
    p.add_argument("--stop-after", type=int, default=0, help="stop after this many failures (0: never)")
    p.add_argument("--quiet", action="store_true", help="print only failures and the summary")
    p.add_argument("--show", default=60, type=int, help="lines of a failure's output shown (default 60)")
    p.add_argument("--print", dest="show_program", action="store_true",
                   help="print the programs of --seeds at --np (no MPI) and exit")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--stacks", default="", help=argparse.SUPPRESS)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    if args.child:
        return child(args)
    features = features_from(args.features)
    seeds = seed_range(args.seeds)
    if args.show_program:
        for n in args.np:
            for seed in seeds:
                prog = programs.generate(seed, n, features, args.steps or None)
                print(prog.describe())
                for i, a in enumerate(prog.actions):
                    print(f"  {i:3d} {a}")
        return 0
    print(f"fuzz: seeds {seeds_text(seeds)} at np {', '.join(map(str, args.np))}, features "
          f"{programs.features_text(features)}", flush=True)
    failed = False
    for n in args.np:
        summary = campaign(n, seeds, features, args, out=lambda s: print(s, flush=True))
        report(summary, features, args)
        failed |= bool(summary.failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
