"""Summaries per (size, algorithm), the aligned table and the JSON document."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np

from ._model import predict
from ..schedule.algorithms import NATIVE

COLUMNS = [  # (header, width, format of the value)
    ("size(B)", 11, "{:d}"), ("algorithm", 16, "{}"), ("iters", 5, "{:d}"),
    ("post:min", 9, "{:.3f}"), ("median", 9, "{:.3f}"), ("max", 9, "{:.3f}"),
    ("total", 9, "{:.2f}"), ("algbw", 7, "{:.2f}"), ("busbw", 7, "{:.2f}"),
    ("xnative", 7, "{:.2f}"), ("xbound", 6, "{:.2f}"), ("model", 8, "{:.3f}"),
    ("floor", 8, "{:.3f}"), ("RS", 8, "{:.2f}"), ("#wrong", 6, "{:d}"),
]
UNITS = ["", "", "", "ms", "ms", "ms", "ms", "GB/s", "GB/s", "speedup", "ratio", "ms", "ms", "ms", ""]


def summarise(variant, samples, n, nbytes, link) -> dict:
    """One result row: latencies over the iterations, bandwidths, model and phases."""
    post = [_post_arrival(s) for s in samples]
    total = [float(s.returns.max() - s.calls.min()) for s in samples]
    ran = Counter(s.ran for s in samples).most_common(1)[0][0]
    wrong = [s.wrong for s in samples if s.wrong is not None]
    med = float(np.median(post))
    algbw = nbytes / med / 1e9 if med > 0 else float("inf")
    return {
        "size": nbytes, "algorithm": variant, "ran": ran, "iters": len(samples),
        "post_arrival": _spread(post), "total": _spread(total),
        "algbw": algbw, "busbw": algbw * 2 * (n - 1) / n,
        "model": float(np.median([predict(ran, n, s.draw.straggler, nbytes, s.draw.delay, *link)
                                  for s in samples])),
        # no schedule ends sooner after the arrival: the straggler's bytes must reach the
        # others (two tiers: every other node over its links; schedule/tiers.py floor)
        "floor": predict("bound", n, None, nbytes, 0.0, *link),
        "delay": float(np.median([s.draw.delay for s in samples])),
        "reduce_scatter": _reduce_scatter(samples),
        "phases": _phases(samples),
        "wrong": sum(wrong) if wrong else None,
    }


def _post_arrival(s) -> float:
    """From the straggler's call (the last call if nobody is late) to the last return."""
    arrived = s.calls.max() if s.draw.straggler is None else s.calls[s.draw.straggler]
    return float(s.returns.max() - arrived)


def _spread(values) -> dict:
    return {"min": float(np.min(values)), "median": float(np.median(values)),
            "max": float(np.max(values)), "samples": [float(v) for v in values]}


def _reduce_scatter(samples):
    """Median over iterations of the slowest early rank's phase 1 (None without a phase 1)."""
    per_iter = []
    for s in samples:
        late = s.phases[0].get("straggler") if s.phases and s.phases[0] else None
        if late is not None:
            per_iter.append(max(p["reduce_scatter"] for r, p in enumerate(s.phases) if r != late))
    return float(np.median(per_iter)) if per_iter else None


def _phases(samples):
    """Per-rank medians of the library's phase timings (reduce_scatter, wait, post_arrival)."""
    if not samples[0].phases or "total" not in samples[0].phases[0]:
        return None
    keys = ("reduce_scatter", "wait", "post_arrival")
    return {k: [float(np.median([s.phases[r][k] for s in samples]))
                for r in range(len(samples[0].phases))] for k in keys}


def compare(rows: list) -> None:
    """Add speedup over native and ratio to the bound (both on median post-arrival)."""
    med = {r["algorithm"]: r["post_arrival"]["median"] for r in rows}
    for r in rows:
        mine = r["post_arrival"]["median"]
        r["speedup_vs_native"] = med[NATIVE] / mine if NATIVE in med and mine else None
        r["x_bound"] = mine / med["bound"] if "bound" in med and med["bound"] else None


def header() -> str:
    names = "".join(f"{h:>{w}} " for h, w, _ in COLUMNS)
    units = "".join(f"{u:>{w}} " for u, (_, w, _) in zip(UNITS, COLUMNS))
    return f"#{names[1:].rstrip()}\n#{units[1:].rstrip()}"


def line(r: dict) -> str:
    name = r["algorithm"] if r["ran"] == r["algorithm"] else f"{r['algorithm']}>{r['ran']}"
    ms = lambda x: None if x is None else 1e3 * x  # noqa: E731
    values = [r["size"], name, r["iters"], ms(r["post_arrival"]["min"]),
              ms(r["post_arrival"]["median"]), ms(r["post_arrival"]["max"]),
              ms(r["total"]["median"]), r["algbw"], r["busbw"], r.get("speedup_vs_native"),
              r.get("x_bound"), ms(r["model"]), ms(r.get("floor")), ms(r["reduce_scatter"]), r["wrong"]]
    return "".join(f"{'-' if v is None else fmt.format(v):>{w}} "
                   for v, (_, w, fmt) in zip(values, COLUMNS)).rstrip()


def write_json(path, config: dict, rows: list) -> None:
    with open(path, "w") as f:
        json.dump({"config": config, "results": rows}, f, indent=1)
        f.write("\n")
