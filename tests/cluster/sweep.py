"""The benchmark across the box's hosts: every layout, link and scenario of a sweep in one
run, one table (docs/LINKS.md has the figures and what they mean).

For each host shape (2x4: 2 hosts of 4 ranks, 4x2) and each link (unshaped veth, or a
rate set with ``box shape HOST rate=R`` on every host: one link per host, shared by its
ranks), for each layout (block: hydra's ``-hosts n1:4,n2:4``; cyclic: ``-hosts n1,n2``,
rank r on host r mod m) and scenario (``late``: the last rank sleeps before each call,
100 ms + --per-mib ms a MiB, enough to hide phase 1; ``none``: nobody late), it runs
``python -m stragglar_mpi.bench`` under the box's hydra and keeps its JSON.  The table
gives post-arrival medians (ms) with the spread of the hierarchical row, the measured
floor (the bench's ``bound`` across nodes: every host takes in the whole buffer at once,
on these links and CPUs), the model's floor and predictions (the library's two tiers as
measured at setup), and the ratios the issue asks about.

    python tests/cluster/sweep.py --out /tmp/sweep              # the whole sweep (about 35 min)
    python tests/cluster/sweep.py --shapes 2x4 --links 1gbit --layouts block --scenarios late
    python tests/cluster/sweep.py --table /tmp/sweep            # the table again, from the JSONs

Root only (namespaces, tc).  Brings the box up with 4 hosts and takes it down at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BOX = str(HERE / "box")
SYNC = ("native", "native-comp1", "native-comp4", "rhd", "hring")
LATE = SYNC + ("stragglar", "hierarchical", "auto")
COLUMNS = ("native", "native-comp1", "native-comp4", "rhd", "hring", "stragglar", "hierarchical", "auto")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="2x4,4x2", help="hosts x ranks (default 2x4,4x2)")
    p.add_argument("--links", default="veth,1gbit", help="veth (unshaped) or a tc rate (default veth,1gbit)")
    p.add_argument("--layouts", default="block,cyclic")
    p.add_argument("--scenarios", default="late,none")
    p.add_argument("--sizes", default="16M,64M", help="bench -b/-e (default 16M,64M)")
    p.add_argument("--iters", type=int, default=5, help="timed iterations at 16 MiB (fewer above 32 MiB)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--per-mib", type=float, default=25.0, help="the late rank's delay: 100 ms + this a MiB")
    p.add_argument("--out", default="/tmp/smpi-sweep", help="folder for the JSONs and the table")
    p.add_argument("--table", metavar="DIR", help="only print the table of the JSONs in DIR")
    p.add_argument("--venv", default=os.environ.get("SMPI_BOX_VENV", str(ROOT / ".venv")))
    args = p.parse_args(argv)
    if args.table:
        print(table(load(Path(args.table))))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, UCX_TLS="tcp,self", UCX_NET_DEVICES="eth0", MPIR_CVAR_CH4_PROGRESS_THROTTLE="1",
               SMPI_BOX_VENV=args.venv)
    runs = [(s, link, lay, sc) for link in args.links.split(",") for s in args.shapes.split(",")
            for lay in args.layouts.split(",") for sc in args.scenarios.split(",")]
    subprocess.run([BOX, "up", "4"], check=True, stdout=subprocess.DEVNULL)
    began, failed = time.time(), 0
    try:
        shaped = None
        for i, (shape, link, layout, scenario) in enumerate(runs, 1):
            if link != shaped:
                for h in ("n1", "n2", "n3", "n4"):
                    subprocess.run([BOX, "shape", h] + (["clear"] if link == "veth" else [f"rate={link}"]),
                                   check=True, stdout=subprocess.DEVNULL)
                shaped = link
            name = f"{shape}-{link}-{layout}-{scenario}"
            print(f"[{i}/{len(runs)}] {name} ({time.time() - began:.0f} s so far)", file=sys.stderr, flush=True)
            rc = subprocess.run(bench_command(args, shape, layout, scenario, out / f"{name}.json"),
                                env=env, cwd=ROOT, stdout=open(out / f"{name}.txt", "w"),
                                stderr=subprocess.STDOUT, timeout=1800).returncode
            if rc:
                failed += 1
                print(f"  {name}: exit {rc} (see {out / name}.txt)", file=sys.stderr)
    finally:
        subprocess.run([BOX, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text = table(load(out))
    (out / "table.md").write_text(text + "\n")
    print(text)
    return 1 if failed else 0


def bench_command(args, shape, layout, scenario, json_path):
    m, k = map(int, shape.split("x"))
    hosts = ",".join(f"n{h}" + (f":{k}" if layout == "block" else "") for h in range(1, m + 1))
    small, large = args.sizes.split(",") if "," in args.sizes else (args.sizes, args.sizes)
    cmd = [BOX, "mpiexec", "-hosts", hosts, "-n", str(m * k), f"{args.venv}/bin/python", "-m",
           "stragglar_mpi.bench", "-b", small, "-e", large, "-f", "4", "-n", str(args.iters),
           "--min-iters", "3", "-w", str(args.warmup), "-q", "--json", str(json_path)]
    if scenario == "late":
        cmd += ["--delay", "100", "--delay-per-mib", str(args.per_mib), "-a", ",".join(LATE)]
    else:
        cmd += ["--straggler", "none", "--delay", "0", "-a", ",".join(SYNC + ("auto",))]
    return cmd


def load(folder: Path) -> list:
    rows = []
    for path in sorted(folder.glob("*.json")):
        shape, link, layout, scenario = path.stem.split("-", 3)
        data = json.loads(path.read_text())
        by_size = {}
        for r in data["results"]:
            by_size.setdefault(r["size"], {})[r["algorithm"]] = r
        for size, results in sorted(by_size.items()):
            rows.append({"shape": shape, "link": link, "layout": layout, "scenario": scenario,
                         "size": size, "results": results, "tiers": data["config"].get("tiers")})
    order = {"2x4": 0, "4x2": 1}
    return sorted(rows, key=lambda r: (r["scenario"] != "late", r["link"] != "veth", order.get(r["shape"], 9),
                                       r["layout"], r["size"]))


def med(results, name):
    r = results.get(name)
    return r["post_arrival"]["median"] if r else None


def table(rows) -> str:
    head = ("| hosts x ranks, link, layout, MiB | " + " | ".join(COLUMNS) +
            " | auto ran | measured floor | model floor | model hring / hier. | hier. spread |"
            " hier. vs hring | vs best comp. | hier. / measured floor | hier. / model floor |"
            " model err hring / hier. | auto / best | wrong |")
    lines = []
    for scenario in ("late", "none"):
        mine = [r for r in rows if r["scenario"] == scenario]
        if not mine:
            continue
        lines += ["", f"**{'the last rank late' if scenario == 'late' else 'nobody late'}**", "", head,
                  "|" + "---|" * (head.count("|") - 1)]
        lines += [line(r) for r in mine]
    return "\n".join(lines).lstrip("\n")


def line(r) -> str:
    res = r["results"]
    ms = lambda v: "-" if v is None else f"{v * 1e3:.1f}"  # noqa: E731
    ratio = lambda a, b: "-" if a is None or b in (None, 0) else f"{a / b:.2f}x"  # noqa: E731
    times = {name: med(res, name) for name in COLUMNS}
    fixed = {n: t for n, t in times.items() if t is not None and n != "auto"}
    best = min(fixed.values()) if fixed else None
    comps = [t for n, t in fixed.items() if n.startswith("native")]
    hier, hring = times.get("hierarchical"), times.get("hring")
    bound = med(res, "bound")
    any_row = next(iter(res.values()))
    floor = any_row.get("floor")
    model = lambda n: res[n]["model"] if n in res else None  # noqa: E731
    spread = "-"
    if "hierarchical" in res:
        s = res["hierarchical"]["post_arrival"]
        spread = f"{s['min'] * 1e3:.0f}-{s['max'] * 1e3:.0f}"
    wrong = sum(v["wrong"] or 0 for v in res.values() if v.get("wrong") is not None)
    err = lambda n: "-" if model(n) is None or times.get(n) is None else f"{model(n) / times[n] - 1:+.0%}"  # noqa: E731
    cells = [f"{r['shape']}, {r['link']}, {r['layout']}, {r['size'] >> 20}"]
    cells += [ms(times[n]) for n in COLUMNS]
    cells += [res["auto"]["ran"] if "auto" in res else "-", ms(bound), ms(floor),
              f"{ms(model('hring'))} / {ms(model('hierarchical'))}", spread,
              ratio(hring, hier), ratio(min(comps) if comps else None, hier), ratio(hier, bound),
              ratio(hier, floor), f"{err('hring')} / {err('hierarchical')}", ratio(times.get("auto"), best),
              str(wrong)]
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
