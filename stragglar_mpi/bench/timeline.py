"""A trace's calls as a picture: ``python -m stragglar_mpi timeline DIR -o timeline.png``.

One row per rank of a communicator (rank 0 on top), one bar per call: its arrival (a tick),
phase 1 (arrived -> phase1_end), the wait for the straggler (phase1_end -> first_message),
phase 2 (first_message -> exited); a call without those marks (native, ring, ...) is one
bar.  A call that never returned is drawn open to its file's write time and marked; a star
marks each call's straggler.  matplotlib (the plot extra) is imported only when drawing.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

from .trace import BAD_INPUT, Trace, TraceError, read

LAST_CALLS = 20
#: segment -> (colour, legend label)
STYLE = {
    "phase 1": ("#4c72b0", "phase 1 (arrived to phase1_end)"),
    "wait": ("#d9d9d9", "wait for the straggler (to first message)"),
    "phase 2": ("#dd8452", "phase 2 (first message to exit)"),
    "call": ("#8c8c8c", "call without phases (arrived to exit)"),
}
OPEN_EDGE = "#c00000"
NEED_MATPLOTLIB = "timeline needs matplotlib: pip install stragglar_mpi[plot]"


@dataclass
class Drawing:
    """What ``draw`` drew: the rows' labels top to bottom, the communicator, the calls."""
    path: str
    comm: str
    rows: list
    seqs: list
    open_calls: int


def pick_comm(trace: Trace, wanted: Optional[str] = None) -> str:
    """The ident of the communicator ``wanted`` (its name or ident), else the one with most calls."""
    comms = trace.comms()
    if not comms:
        raise TraceError(f"{trace.directory}: no communicator in the headers")
    if wanted is None:
        return max(comms, key=lambda i: (len(trace.calls(i)), comms[i]["name"]))
    for ident, entry in comms.items():
        if wanted in (ident, entry["name"]):
            return ident
    raise TraceError(f"no communicator {wanted!r}; the trace has "
                     + ", ".join(f"{e['name']} ({i})" for i, e in comms.items()))


def pick_calls(seqs, calls: Optional[tuple] = None) -> list:
    """The seqs in ``calls`` = (first, last), either end None for open; default the last 20."""
    seqs = sorted(seqs)
    if calls is None:
        return seqs[-LAST_CALLS:]
    first, last = calls
    return [s for s in seqs if (first is None or s >= first) and (last is None or s <= last)]


def segments(call, written: float) -> list:
    """(kind, start, end) of one call; an open call ends at ``written`` (on the same clock),
    its last segment the phase it was in."""
    still_in = call.exited is None and call.phase
    end = call.exited if call.exited is not None else written
    if call.phase1_end is None and still_in == "phase 1":
        return [("phase 1", call.arrived, end)]
    found, start = [], call.arrived
    if call.phase1_end is not None:
        found.append(("phase 1", start, call.phase1_end))
        start = call.phase1_end
    if call.first_message is not None:
        found += [("wait", start, call.first_message), ("phase 2", call.first_message, end)]
    else:
        found.append(("wait" if still_in == "phase 2" else "call", start, end))
    return [(kind, a, b) for kind, a, b in found if b >= a]


@dataclass
class _Bar:
    """One segment to draw, in ms from the first arrival shown."""
    rank: int
    kind: str
    start: float
    end: float
    open: bool


def draw(trace: Trace, path: str, comm: Optional[str] = None, calls: Optional[tuple] = None) -> Drawing:
    """Write the picture of ``comm``'s ``calls`` to ``path``; return what was drawn."""
    plt = _pyplot()
    ident = pick_comm(trace, comm)
    entry = trace.comms()[ident]
    merged = trace.calls(ident)
    seqs = pick_calls(merged, calls)
    if not seqs:
        raise TraceError(f"no calls {calls} on {entry['name']} (it has {min(merged)} to {max(merged)})")
    shown = {s: merged[s] for s in seqs}
    t0 = min(c.arrived for by_rank in shown.values() for c in by_rank.values())
    bars, ends = _bars(trace, ident, shown, t0)
    rows = [_row_label(trace, ident, r) for r in range(entry["size"])]
    windows = _windows(bars)
    fig, axes = plt.subplots(1, len(windows), sharey=True, squeeze=False,
                             figsize=(11.5, 1.2 + 0.55 * len(rows)),
                             gridspec_kw={"width_ratios": [4, 1][:len(windows)], "wspace": 0.04})
    for ax, window in zip(axes[0], windows):
        _draw_calls(ax, bars, ends, shown, t0)
        ax.set_xlim(*window)
    _dress(axes[0], rows, entry["name"], seqs, len(ends))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Drawing(path, ident, rows, seqs, len(ends))


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise TraceError(NEED_MATPLOTLIB) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _row_label(trace, ident, rank) -> str:
    world = trace.comms()[ident]["world_ranks"][rank]
    label = f"rank {rank}" if world == rank else f"rank {rank} (world {world})"
    return label if world in trace.files else label + " (no file)"


def _bars(trace, ident, shown, t0) -> tuple:
    """Every segment as a _Bar, and (rank, ms, phase) where each unfinished call ended."""
    bars, ends = [], []
    for by_rank in shown.values():
        for rank, call in by_rank.items():
            written = trace.file_of(ident, rank).written_on(ident)
            bars += [_Bar(rank, kind, (a - t0) * 1e3, (b - t0) * 1e3, call.exited is None)
                     for kind, a, b in segments(call, written)]
            if call.exited is None or call.error is not None:
                at = call.exited if call.exited is not None else max(written, call.arrived)
                ends.append((rank, (at - t0) * 1e3, call.phase))
    return bars, ends


def _windows(bars) -> list:
    """The x ranges to draw: one, or two when calls left open run far past the others (a
    timeout): the calls, then a narrow window around the write time."""
    body = max([b.start for b in bars] + [b.end for b in bars if not b.open])
    tail = max(b.end for b in bars)
    pad = 0.03 * max(body, 1e-3)
    if tail <= 3 * max(body, 1e-3):
        return [(-pad, tail + pad)]
    return [(-pad, body + pad), (tail - 6 * pad, tail + 3 * pad)]


def _draw_calls(ax, bars, ends, shown, t0):
    """Every bar, arrival, straggler and unfinished call's end on one axes."""
    for b in bars:
        ax.barh(b.rank, b.end - b.start, left=b.start, height=0.6, color=STYLE[b.kind][0],
                edgecolor=OPEN_EDGE if b.open else "none", linewidth=1.0, hatch="//" if b.open else None)
    for seq, by_rank in shown.items():
        first = min(c.arrived for c in by_rank.values())
        ax.annotate(str(seq), ((first - t0) * 1e3, -0.45), fontsize=7, color="#555555",
                    va="bottom", annotation_clip=True)
        for rank, call in by_rank.items():
            x = (call.arrived - t0) * 1e3
            ax.plot([x, x], [rank - 0.38, rank + 0.38], color="k", linewidth=1)
            if call.straggler == rank:
                ax.plot(x, rank, marker="*", color="#e0b000", markeredgecolor="k",
                        markeredgewidth=0.5, markersize=11, zorder=5)
    for rank, x, phase in ends:
        ax.plot(x, rank, marker=">", color=OPEN_EDGE, markersize=8, zorder=5)
        ax.annotate(phase, (x, rank + 0.3), xytext=(4, 0), textcoords="offset points",
                    fontsize=7, color=OPEN_EDGE, va="top")


def _dress(axes, rows, name, seqs, unfinished):
    """Rows, labels, title, legend; a second axes (the write time) without its left spine."""
    axes[0].set_yticks(range(len(rows)), rows)
    axes[0].set_ylim(len(rows) - 0.5, -0.8)          # rank 0 on top, room for the call numbers
    for ax in axes:
        ax.grid(True, axis="x", alpha=0.3)
    if len(axes) == 2:
        axes[0].spines["right"].set_visible(False)
        axes[1].spines["left"].set_visible(False)
        axes[1].tick_params(left=False)
        axes[1].set_title("... at the write time", fontsize=8, loc="left")
    axes[0].set_xlabel("ms from the first arrival shown")
    shown = f"call {seqs[0]}" if len(seqs) == 1 else f"calls {seqs[0]}-{seqs[-1]}"
    more = f" ({unfinished} failed or did not return)" if unfinished else ""
    axes[0].set_title(f"{name}: {shown}{more}", loc="left")
    axes[-1].legend(handles=_legend(), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                    frameon=False)


def _legend() -> list:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    return [Patch(color=c, label=label) for c, label in STYLE.values()] + [
        Line2D([], [], color="k", marker="|", linestyle="none", markersize=10, label="arrival"),
        Line2D([], [], color="#e0b000", marker="*", markeredgecolor="k", linestyle="none",
               markersize=10, label="the call's straggler"),
        Patch(facecolor="white", edgecolor=OPEN_EDGE, hatch="//", label="did not return (drawn to the write time)"),
        Line2D([], [], color=OPEN_EDGE, marker=">", linestyle="none", label="where it was (phase)")]


def main(directory: str, output: str, comm: Optional[str] = None, calls: Optional[tuple] = None) -> int:
    """``python -m stragglar_mpi timeline DIR -o OUT.png``: 0 when drawn, 2 on bad input."""
    try:
        drawing = draw(read(directory), output, comm=comm, calls=calls)
    except TraceError as e:
        sys.stderr.write(f"timeline: {e}\n")
        return BAD_INPUT
    shown = f"calls {drawing.seqs[0]}-{drawing.seqs[-1]}"
    sys.stdout.write(f"wrote {output}: {len(drawing.rows)} ranks, {shown}\n")
    return 0
