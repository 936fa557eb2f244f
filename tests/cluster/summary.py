"""The fault runs' figures from the box's results file (test_box.py, $SMPI_BOX_RESULTS):

    python tests/cluster/summary.py [/tmp/smpibox-results.jsonl]

one Markdown row per fault and algorithm: runs, exit codes, each rank's outcomes and the
seconds from the fault to its error (min / median / max), what the survivors named."""
import json
import statistics
import sys
from collections import defaultdict


def span(values):
    if not values:
        return "-"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main(path):
    runs = defaultdict(list)
    for line in open(path):
        rec = json.loads(line)
        runs[(rec["kind"], rec.get("algo", ""))].append(rec)
    print("| fault | algorithm | runs | exit codes | rank: outcomes, s from the fault to the error (min / median / max), missing named |")
    print("|---|---|---|---|---|")
    for (kind, algo), recs in runs.items():
        if "ranks" not in recs[0] or kind.startswith("sbatch"):
            continue
        codes = sorted({str(r["rc"]) for r in recs})
        cells = []
        for rank in sorted(recs[0]["ranks"], key=int):
            seen = [r["ranks"][rank] for r in recs]
            outcomes = defaultdict(int)
            for v in seen:
                outcomes[v["outcome"]] += 1
            after = [v["after_fault"] for v in seen if "after_fault" in v]
            named = sorted({tuple(v.get("missing") or ()) for v in seen if v["outcome"] != "none"})
            text = ", ".join(f"{k} x{n}" for k, n in outcomes.items())
            cells.append(f"{rank}: {text}" + (f", {span(after)} s, missing {named}" if after else ""))
        print(f"| {kind} | {algo} | {len(recs)} | {', '.join(codes)} | {'; '.join(cells)} |")
    for (kind, algo), recs in runs.items():
        if kind.startswith("sbatch"):
            ends = [r["ended_after"] for r in recs]
            states = sorted({f"{r['state']} {r['exit']}" for r in recs})
            print(f"\n{kind}: {len(recs)} runs, job {', '.join(states)}, ended {span(ends)} s after the cut")
        elif "ranks" not in recs[0]:
            secs = [r["seconds"] for r in recs if "seconds" in r]
            codes = sorted({str(r["rc"]) for r in recs})
            print(f"\n{kind}: {len(recs)} runs, exit {', '.join(codes)}" + (f", {span(secs)} s a run" if secs else ""))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/smpibox-results.jsonl")
