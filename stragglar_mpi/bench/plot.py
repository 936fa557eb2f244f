"""Post-arrival speedup over native against size, one line per algorithm.

    python -m stragglar_mpi.bench.plot OUT.png RUN.json [RUN.json ...]

draws one panel per JSON file written by ``python -m stragglar_mpi.bench --json``.
"""
from __future__ import annotations

import json
import sys
from ..schedule.algorithms import AUTO, DIRECT, NATIVE, RHD, RING, STRAGGLAR
from ..schedule.units import format_size

_STYLE = {STRAGGLAR: ("C3", "o"), AUTO: ("C1", "x"), RING: ("C0", "s"), RHD: ("C2", "^"),
          DIRECT: ("C4", "v"), "bound": ("k", "")}


def plot(runs: list, path: str) -> None:
    """``runs``: documents as written by ``--json``; one panel each, side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 4.2), squeeze=False, sharey=True)
    for ax, run in zip(axes[0], runs):
        _panel(ax, run)
    axes[0][0].set_ylabel("post-arrival speedup over native comm.Allreduce")
    axes[0][-1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax, run):
    from matplotlib.ticker import FuncFormatter

    medians = _medians(run["results"])
    native = medians.get(NATIVE, {})
    for name, by_size in medians.items():
        if name == NATIVE:
            continue
        sizes = [s for s in sorted(by_size) if s in native]
        color, marker = _STYLE.get(name, ("C7", "."))
        label = "lower bound (pairwise exchange)" if name == "bound" else name
        ax.plot(sizes, [native[s] / by_size[s] for s in sizes], color=color, marker=marker,
                linestyle="--" if name == "bound" else "-", label=label)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
    ticks = sorted({s for by in medians.values() for s in by})
    ax.set_xticks(ticks, [format_size(s) for s in ticks], rotation=45)
    ax.set_xlabel("buffer size")
    c = run["config"]
    ax.set_title(f"{c['ranks']} ranks, {c['args']['datatype']} {c['args']['op']}", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def _medians(results) -> dict:
    out = {}
    for r in results:
        out.setdefault(r["algorithm"], {})[r["size"]] = r["post_arrival"]["median"]
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or not argv[0].endswith(".png"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    runs = []
    for name in argv[1:]:
        with open(name) as f:
            runs.append(json.load(f))
    plot(runs, argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
