"""The timeline picture: what the host and the GPU did during the steps, drawn with matplotlib.

Rows, top to bottom: step and other ranges (NVTX / record_function), CUDA API calls (host syncs in
red), GPU kernels (shaded by how busy the GPU was, about a pixel at a time), and copies (pageable ones in
orange). Time is in milliseconds from the first step's
start; the picture runs on past the last step while the GPU is still running work launched in it. With a
baseline, the baseline is drawn above the trace, both on the same time scale, so a fix that shortens the
steps shows as a shorter picture.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from checker.trace.analyses.syncs import sync_rows
from checker.trace.errors import TraceError
from checker.trace.intervals import covered_before

ROWS = ("ranges", "CUDA API", "kernels", "copies")
COLORS = {"step": "#9ecae1", "range": "#6baed6", "api": "#bdbdbd", "sync": "#d62728", "kernel": "#2ca02c",
          "memset": "#98df8a", "copy": "#1f77b4", "pageable": "#ff7f0e"}
MAX_STEPS = 12  # draw at most this many steps, so the bars stay readable


def _window(trace, max_steps: int) -> tuple[int, int]:
    """From the first drawn step's start to the end of the last drawn step, or of the GPU work launched in
    the drawn steps if that ends later: a GPU that lags behind the host must not be cut off."""
    steps = trace.get_steps()
    if len(steps):
        steps = steps.head(max_steps)
        lo, hi = int(steps["start_ns"].min()), int(steps["end_ns"].max())
    else:
        windows = trace.windows()
        lo, hi = int(windows["start_ns"].iloc[0]), int(windows["end_ns"].iloc[0])
    events = trace.events
    launched = events[(events["kind"] == "cuda_api") & (events["start_ns"] >= lo) & (events["start_ns"] < hi)]
    correlations = launched["correlation"].dropna()
    if len(correlations):
        gpu = events[events["device"].notna() & events["correlation"].isin(correlations)]
        if len(gpu):
            # up to the last GPU work that follows on from the rest: a kernel that a damaged time stamp put hours
            # away (a gap of more than ten drawn windows) would squeeze everything else into one pixel
            ends = np.sort(gpu["end_ns"].to_numpy(dtype=np.int64))
            ends = ends[ends > hi]
            if len(ends):
                gaps = np.diff(np.concatenate(([hi], ends)))
                far = np.flatnonzero(gaps > 10 * max(hi - lo, 1))
                kept = ends[:far[0]] if len(far) else ends
                if len(kept):
                    hi = int(kept[-1])
    return lo, hi


def _bars(ax, y: float, starts, ends, lo: int, color: str, height: float = 0.8, min_ms: float = 1e-4) -> None:
    """One bar per interval; very short ones are drawn min_ms wide so that they stay visible."""
    if not len(starts):
        return
    left = (np.asarray(starts) - lo) / 1e6
    width = np.maximum((np.asarray(ends) - np.asarray(starts)) / 1e6, min_ms)
    ax.broken_barh(list(zip(left, width)), (y - height / 2, height), facecolors=color, edgecolors="none")


def _occupancy(ax, y: float, starts, ends, lo: int, hi: int, color: str, bins: int = 1500) -> None:
    """The GPU's kernels as a strip about a pixel per bin, each bin as opaque as the share of it the GPU was busy
    (at least faintly where it ran anything): a comb of kernels far shorter than a pixel, with idle gaps between
    them, shows pale, where bars widened to a pixel each would paint it solid."""
    if not len(starts) or hi <= lo:
        return
    from matplotlib.colors import to_rgba

    edges = np.linspace(lo, hi, bins + 1)
    busy = np.diff(covered_before(edges, starts, ends)) / np.diff(edges)
    used = busy > 0
    rgba = np.tile(to_rgba(color), (int(used.sum()), 1))
    rgba[:, 3] = np.clip(busy[used], 0.12, 1.0)
    left = (edges[:-1][used] - lo) / 1e6
    width = np.diff(edges)[used] / 1e6
    ax.broken_barh(list(zip(left, width)), (y - 0.4, 0.8), facecolors=rgba, edgecolors="none")


def _draw(ax, trace, max_steps: int, title: str) -> float:
    lo, hi = _window(trace, max_steps)
    thin = (hi - lo) / 1e6 / 1500  # about one pixel of the picture
    events = trace.events
    inside = ((events["end_ns"] > lo) & (events["start_ns"] < hi)).to_numpy()
    kind = events["kind"].to_numpy()
    starts, ends = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    host = events["device"].isna().to_numpy()
    y = {name: len(ROWS) - 1 - i for i, name in enumerate(ROWS)}

    steps = trace.get_steps().head(max_steps)
    ranges = inside & host & (kind == "range")
    ranges &= ~events["name"].isin(list(steps["name"])).to_numpy()
    _bars(ax, y["ranges"], steps["start_ns"], steps["end_ns"], lo, COLORS["step"], 0.8)
    _bars(ax, y["ranges"], starts[ranges], ends[ranges], lo, COLORS["range"], 0.35)
    for row in steps.itertuples(index=False):
        ax.text((row.start_ns - lo) / 1e6, y["ranges"], f" {row.step}", va="center", fontsize=7)

    api = inside & (kind == "cuda_api")
    syncing = np.zeros(len(events), dtype=bool)
    syncing[sync_rows(events)] = True
    if not api.any():  # CPU-only: the sync ops stand in for the CUDA API row
        api = inside & syncing
    _bars(ax, y["CUDA API"], starts[api & ~syncing], ends[api & ~syncing], lo, COLORS["api"], min_ms=thin)
    _bars(ax, y["CUDA API"], starts[api & syncing], ends[api & syncing], lo, COLORS["sync"], min_ms=thin)

    kernels = inside & (kind == "kernel")
    _occupancy(ax, y["kernels"], starts[kernels], ends[kernels], lo, hi, COLORS["kernel"])
    memset = inside & (kind == "memset")
    _bars(ax, y["copies"], starts[memset], ends[memset], lo, COLORS["memset"], min_ms=thin)
    copies = inside & (kind == "memcpy")
    src = events["src_kind"].astype(object).to_numpy()
    dst = events["dst_kind"].astype(object).to_numpy()
    pageable = copies & ((src == "pageable") | (dst == "pageable"))
    _bars(ax, y["copies"], starts[copies & ~pageable], ends[copies & ~pageable], lo, COLORS["copy"], min_ms=thin)
    _bars(ax, y["copies"], starts[pageable], ends[pageable], lo, COLORS["pageable"], min_ms=thin)

    ax.set_yticks([y[name] for name in ROWS], ROWS)
    ax.set_ylim(-0.7, len(ROWS) - 0.3)
    ax.set_title(title, fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)
    return (hi - lo) / 1e6


def draw_timeline(trace, out, baseline=None, max_steps: int = MAX_STEPS) -> Path:
    """Write the picture to out (.png or .svg); with baseline, baseline above, trace below, same scale."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg"):
        raise TraceError(f"{out}: the timeline is written as .png or .svg; name the file so")
    if not out.parent.is_dir():  # never create folders: a typo in the path should not leave a tree behind
        raise TraceError(f"{out}: the folder {out.parent} does not exist; create it first or write the timeline elsewhere")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels = [(baseline, "before"), (trace, "after")] if baseline is not None else [(trace, "")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 2.2 * len(panels) + 0.8), squeeze=False)
    spans = []
    for ax, (tr, label) in zip(axes[:, 0], panels):
        s = tr.summary()
        name = "/".join(Path(tr.source).parts[-2:])
        drawn = min(s["steps"], max_steps)
        shown = f"{s['steps']} steps" if drawn == s["steps"] else f"first {drawn} of {s['steps']} steps"
        title = (f"{label + ': ' if label else ''}{name} ({tr.format}), {shown}, "
                 f"{s['host_syncs_per_step']:g} host syncs/step, {s['pageable_h2d_per_step']:g} pageable copies/step")
        spans.append(_draw(ax, tr, max_steps, title))
    for ax in axes[:, 0]:
        ax.set_xlim(0, max(spans) * 1.01 if spans and max(spans) > 0 else 1)
    axes[-1, 0].set_xlabel("ms from the first step's start")
    legend = [Patch(color=COLORS[k], label=t) for k, t in (("step", "step"), ("range", "other range"), ("api", "CUDA call"),
              ("sync", "host sync"), ("kernel", "kernels (paler: GPU busy less)"), ("copy", "copy"), ("pageable", "pageable copy"))]
    fig.legend(handles=legend, loc="lower center", ncol=7, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    try:
        fig.savefig(out, dpi=120)
    except OSError as exc:  # /proc/t.png, a read-only folder, a full disk
        raise TraceError(f"{out}: cannot write the timeline there ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
    return out


# --- several ranks of one data-parallel job: a band per rank -----------------------------------------------------

RANK_LANES = ("host ops", "all-reduce", "kernels")
RANK_COLORS = {"ops": "#6baed6", "collective": "#1f77b4", "wait": "#d62728", "kernel": "#2ca02c"}


def rank_lanes(traces: list, max_steps: int = MAX_STEPS) -> list[dict]:
    """What the per-rank picture draws, rank 0 first: each rank's drawn steps (numbers every rank traced, at most
    ``max_steps``), its recorded host ops, its all-reduces split into the wait for a later rank (the all-reduce's
    duration beyond the same all-reduce's shortest on any rank, drawn first: the rank arrived and waited) and the
    rest, and its GPU kernels. Times are each rank's own, in ns from its first drawn step's start: the ranks' clocks
    need not agree, their steps' numbers do."""
    from checker.trace.analyses.collectives import collective_runs

    frames = [t.get_steps().set_index("step") for t in traces]
    common = sorted(set.intersection(*(set(int(s) for s in f.index) for f in frames)))[:max_steps]
    runs = [collective_runs(t.events) for t in traces]
    lanes = []
    for rank, (trace, steps, mine) in enumerate(zip(traces, frames, runs)):
        drawn = steps.loc[common]
        lo = int(drawn["start_ns"].min()) if len(drawn) else 0
        hi = int(drawn["end_ns"].max()) if len(drawn) else 0
        events = trace.events
        inside = (events["start_ns"] < hi) & (events["end_ns"] > lo)
        ops = events[inside & (events["kind"] == "cpu_op")]
        kernels = events[inside & (events["kind"] == "kernel")]
        lanes.append({"rank": rank, "lo": lo, "hi": hi, "steps": drawn.reset_index()[["step", "start_ns", "end_ns"]],
                      "ops": (ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)),
                      "kernels": (kernels["start_ns"].to_numpy(np.int64), kernels["end_ns"].to_numpy(np.int64)),
                      "wait": ([], []), "collective": ([], [])})
    for step in common:
        per_rank = [r[r["step"] == step] for r in runs]
        count = min(len(r) for r in per_rank)
        if not count:
            continue
        least = np.min(np.stack([r["dur_ns"].to_numpy(np.int64)[:count] for r in per_rank]), axis=0)
        for lane, r in zip(lanes, per_rank):
            starts, ends = r["start_ns"].to_numpy(np.int64)[:count], r["end_ns"].to_numpy(np.int64)[:count]
            waited = starts + (ends - starts - least)
            lane["wait"][0].extend(starts)
            lane["wait"][1].extend(waited)
            lane["collective"][0].extend(waited)
            lane["collective"][1].extend(ends)
    for lane in lanes:
        for key in ("wait", "collective"):
            lane[key] = tuple(np.asarray(part, dtype=np.int64) for part in lane[key])
    return lanes


def draw_rank_timeline(traces: list, out, max_steps: int = MAX_STEPS, exclude_steps=()) -> Path:
    """Write a picture of a data-parallel job to out (.png or .svg): a band per rank, rank 0 on top, each with its
    host ops, its all-reduces (the wait for a later rank in red) and its GPU kernels, every rank on one time scale
    from its own first drawn step; the title names the straggler, or says the late rank did no more work."""
    from checker.trace.ranks import ranks_summary

    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg"):
        raise TraceError(f"{out}: the timeline is written as .png or .svg; name the file so")
    if not out.parent.is_dir():
        raise TraceError(f"{out}: the folder {out.parent} does not exist; create it first or write the timeline elsewhere")
    if len(traces) < 2:
        raise TraceError("a timeline of ranks needs two traces or more: the first is rank 0, --ranks names the others")
    lanes = rank_lanes(traces, max_steps)
    if not any(len(lane["steps"]) for lane in lanes):
        raise TraceError("the ranks' traces share no step number: are they traces of one job?")
    summary = ranks_summary(traces, exclude_steps)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(lanes), 1, figsize=(12, 1.7 * len(lanes) + 1.0), squeeze=False, sharex=True)
    span = max((lane["hi"] - lane["lo"]) / 1e6 for lane in lanes)
    names = RANK_LANES if any(len(lane["kernels"][0]) for lane in lanes) else RANK_LANES[:2]  # a CPU job: no GPU
    y = {name: len(names) - 1 - i for i, name in enumerate(names)}
    for ax, lane, row in zip(axes[:, 0], lanes, summary["ranks"]):
        lo, hi = lane["lo"], lane["hi"]
        for step in lane["steps"].itertuples(index=False):
            ax.axvline((step.start_ns - lo) / 1e6, color="#999999", lw=0.6, alpha=0.6)
            ax.text((step.start_ns - lo) / 1e6, len(names) - 0.45, f" {step.step}", fontsize=7, va="bottom")
        _occupancy(ax, y["host ops"], *lane["ops"], lo, hi, RANK_COLORS["ops"])
        _bars(ax, y["all-reduce"], *lane["collective"], lo, RANK_COLORS["collective"], min_ms=span / 1500)
        _bars(ax, y["all-reduce"], *lane["wait"], lo, RANK_COLORS["wait"], min_ms=span / 1500)
        if "kernels" in y:
            _occupancy(ax, y["kernels"], *lane["kernels"], lo, hi, RANK_COLORS["kernel"])
        share = row["wait_share"]
        title = (f"rank {lane['rank']}: {Path(traces[lane['rank']].source).name}, step {row['step_ms'] or 0:.2f} ms, "
                 f"waiting {share or 0:.0%} of it in all-reduces, {row['work']['ops_per_step']:g} ops/step")
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_yticks([y[name] for name in names], names)
        ax.set_ylim(-0.7, len(names) - 0.1)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlim(0, span * 1.01 if span > 0 else 1)
    axes[-1, 0].set_xlabel("ms from each rank's first drawn step (each rank on its own clock)")
    if summary["straggler"] is not None:
        verdict = f"straggler: rank {summary['straggler']} ({'; '.join(summary['late_rank_did_more'])})"
    elif summary["late_rank"] is not None:
        verdict = (f"no straggler: rank {summary['waiting_rank']} waits for rank {summary['late_rank']}, which did no "
                   "more work per step")
    else:
        verdict = "no all-reduce inside a step"
    fig.suptitle(verdict, fontsize=9, x=0.01, ha="left")
    legend = [Patch(color=RANK_COLORS[k], label=t) for k, t in (("ops", "host ops (paler: busy less)"),
              ("collective", "all-reduce"), ("wait", "waiting for a later rank"), ("kernel", "kernels"))]
    fig.legend(handles=legend, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    try:
        fig.savefig(out, dpi=120)
    except OSError as exc:
        raise TraceError(f"{out}: cannot write the timeline there ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
    return out
