"""GPU busy and idle time per step, and why the GPU was idle.

A step's window is its range on the host, from its start to its end. The GPU is busy while any kernel,
copy or memset runs (on any stream; overlapping work counts once) and idle for the rest of the window.

Each idle gap ends when the next piece of GPU work starts. If that work was launched by the host only
after the gap began, the GPU sat waiting for the host: the gap up to the launch is ``idle_host_wait_ns``
(Python overhead, a data loader, a host sync that drained the queue, ...). The rest of the gap, from
the launch to the start, and gaps whose next work was already queued, are ``idle_other_ns`` (launch
latency, waiting on a copy or another stream). A gap with no later GPU work is waiting on the host;
work whose launch call is not in the trace counts as queued in time.

Of the host-wait part, ``idle_after_sync_ns`` is what began while the host sat in a host sync: the sync let the
queue run dry, and the GPU waited until the host, back from it, launched again. That idle is the sync's cost to
the step where the GPU is the busier side (where the host is, the sync's own wait is).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from checker.trace.analyses.calls import launch_rows
from checker.trace.intervals import merge

IDLE_COLUMNS = {"step": "int64", "window_ns": "int64", "busy_ns": "int64", "idle_ns": "int64",
                "idle_host_wait_ns": "int64", "idle_other_ns": "int64", "idle_after_sync_ns": "int64",
                "idle_fraction": float}
GPU_WORK = ("kernel", "memcpy", "memset")
CLOCK_SLACK_NS = 20_000  # host and GPU time stamps agree to about this


def empty_idle() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in IDLE_COLUMNS.items()})


def in_a_sync(t: int, sync_s: np.ndarray, sync_e: np.ndarray) -> bool:
    """Whether the host was inside a host sync when the GPU ran out of work at t (with the clocks' slack)."""
    if not len(sync_s):
        return False
    return bool(((sync_s <= t + CLOCK_SLACK_NS) & (sync_e >= t - CLOCK_SLACK_NS)).any())


def gpu_idle(events: pd.DataFrame, steps: pd.DataFrame, syncs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per step: window_ns, busy_ns, idle_ns, idle_host_wait_ns, idle_other_ns, idle_after_sync_ns,
    idle_fraction. Empty when the trace has no GPU work (a CPU-only trace) or no steps. ``syncs`` (start_ns,
    dur_ns: the host syncs) gives idle_after_sync_ns; without it that column is 0.
    """
    rows = np.flatnonzero(events["kind"].isin(GPU_WORK).to_numpy())
    if not len(rows) or steps.empty:
        return empty_idle()
    starts = events["start_ns"].to_numpy()[rows]
    ends = events["end_ns"].to_numpy()[rows]
    calls = launch_rows(events, rows)
    unknown = np.iinfo(np.int64).min  # work with no launch call in the trace: taken as queued in time
    call_start = np.where(calls >= 0, events["start_ns"].to_numpy()[np.maximum(calls, 0)], unknown)
    busy_s, busy_e = merge(starts, ends)
    sync_s = syncs["start_ns"].to_numpy(dtype=np.int64) if syncs is not None and len(syncs) else np.empty(0, np.int64)
    sync_e = sync_s + (syncs["dur_ns"].to_numpy(dtype=np.int64) if len(sync_s) else 0)
    # when the work that opens each busy interval was launched (the earliest launch among its starters)
    order = np.lexsort((call_start, starts))
    first_at = np.searchsorted(starts[order], busy_s, side="left")
    opened_by_launch = call_start[order][first_at]
    out = []
    for step, lo, hi in steps[["step", "start_ns", "end_ns"]].itertuples(index=False):
        window = max(int(hi - lo), 0)
        a = np.searchsorted(busy_e, lo, side="right")     # first busy interval ending after lo
        b = np.searchsorted(busy_s, hi, side="left")      # busy intervals starting before hi
        s, e = np.maximum(busy_s[a:b], lo), np.minimum(busy_e[a:b], hi)
        busy = int(np.maximum(e - s, 0).sum())
        gap_start = np.concatenate([[lo], e])
        gap_end = np.concatenate([s, [hi]])
        nxt = np.arange(a, b + 1)  # the busy interval that ends each gap (b: the first after the window)
        # when the GPU ran out of work before each gap (the first: the busy interval before the window, if any)
        went_idle = np.concatenate([[busy_e[a - 1] if a > 0 else lo], busy_e[a:b]])
        host = after_sync = 0
        for g0, g1, k, dry in zip(gap_start, gap_end, nxt, went_idle):
            if g1 <= g0:
                continue
            # Python ints: the "unknown launch" sentinel (int64 min) minus a time would wrap around in int64
            launched = int(opened_by_launch[k]) if k < len(busy_s) else None
            g0, g1 = int(g0), int(g1)
            waited = g1 - g0 if launched is None else max(0, min(launched, g1) - g0)
            host += waited
            if waited and in_a_sync(int(dry), sync_s, sync_e):
                after_sync += waited
        idle = window - busy
        host = min(host, idle)
        out.append((int(step), window, busy, idle, host, idle - host, min(after_sync, host),
                    idle / window if window else np.nan))
    return pd.DataFrame(out, columns=list(IDLE_COLUMNS)).astype(IDLE_COLUMNS)
