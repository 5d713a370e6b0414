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
        windows = trace._windows()
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
