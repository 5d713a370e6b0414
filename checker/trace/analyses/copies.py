"""Copies between host and GPU, and the ones that read or write pageable host memory.

The GPU's copy engine can only read page-locked (pinned) host memory. A copy from pageable memory is
staged by the driver through a pinned buffer while the calling thread waits, so it costs CPU time even
when it was asked for as asynchronous. For each copy this reports the CUDA call that launched it and
the CPU time it held the thread: that call's duration, plus the cudaStreamSynchronize that PyTorch
issues right after a blocking copy.

``.to(device, non_blocking=True)`` on pageable memory is the classic mistake: the copy is launched
asynchronously but still staged by the CPU, and no sync follows. A pageable host copy launched with an
Async call and not followed by a sync on its thread is reported as ``non_blocking_requested``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from checker.trace.analyses.calls import launch_rows, next_call_rows
from checker.trace.analyses.stack import where_of
from checker.trace.analyses.syncs import is_sync_call
from checker.trace.steps import rows_in_steps

COPY_COLUMNS = {"step": "Int64", "name": object, "start_ns": "int64", "dur_ns": "int64", "bytes": "Int64",
                "copy_kind": object, "src_kind": object, "dst_kind": object, "pageable": bool, "api": object,
                "cpu_blocked_ns": "int64", "non_blocking_requested": bool, "where": object}


def empty_copies() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in COPY_COLUMNS.items()})


def copies(events: pd.DataFrame, in_steps: bool, exclude_steps=()) -> pd.DataFrame:
    """One row per memcpy (inside steps when in_steps), with its launch call and the CPU time it held."""
    rows = np.flatnonzero((events["kind"] == "memcpy").to_numpy())
    if in_steps:
        rows = rows_in_steps(events, rows, exclude_steps)
    if not len(rows):
        return empty_copies()
    sub = events.iloc[rows]
    copy_kind = sub["copy_kind"].astype(object).to_numpy()
    src, dst = sub["src_kind"].astype(object).to_numpy(), sub["dst_kind"].astype(object).to_numpy()
    pageable = ((copy_kind == "HtoD") & (src == "pageable")) | ((copy_kind == "DtoH") & (dst == "pageable"))
    calls = launch_rows(events, rows)
    following = next_call_rows(events, calls)
    names = events["name"].astype(object).to_numpy()
    dur = (events["end_ns"] - events["start_ns"]).to_numpy()
    api = np.array([names[c] if c >= 0 else None for c in calls], dtype=object)
    then_syncs = np.array([f >= 0 and is_sync_call(str(names[f])) for f in following], dtype=bool)
    blocked = np.array([(dur[c] if c >= 0 else 0) + (dur[f] if s else 0)
                        for c, f, s in zip(calls, following, then_syncs)], dtype=np.int64)
    is_async = np.array([a is not None and "Async" in a for a in api], dtype=bool)
    frame = pd.DataFrame({
        "step": sub["step"].to_numpy(),
        "name": sub["name"].astype(str).to_numpy(),
        "start_ns": sub["start_ns"].to_numpy(),
        "dur_ns": (sub["end_ns"] - sub["start_ns"]).to_numpy(),
        "bytes": sub["bytes"].to_numpy(),
        "copy_kind": copy_kind, "src_kind": src, "dst_kind": dst,
        "pageable": pageable,
        "api": api,
        "cpu_blocked_ns": blocked,
        "non_blocking_requested": pageable & is_async & ~then_syncs,
        "where": where_of(events, np.where(calls >= 0, calls, rows)),
    })
    return frame.astype(COPY_COLUMNS)


def copy_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Copies grouped by direction and memory: copy_kind, src_kind, dst_kind, count, bytes, gpu_ns,
    cpu_blocked_ns, non_blocking_requested (count), gb_per_s."""
    columns = {"copy_kind": object, "src_kind": object, "dst_kind": object, "count": "int64", "bytes": "int64",
               "gpu_ns": "int64", "cpu_blocked_ns": "int64", "non_blocking_requested": "int64", "gb_per_s": float}
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})
    grouped = (frame.fillna({"bytes": 0}).groupby(["copy_kind", "src_kind", "dst_kind"], dropna=False, sort=False)
               .agg(count=("name", "size"), bytes=("bytes", "sum"), gpu_ns=("dur_ns", "sum"),
                    cpu_blocked_ns=("cpu_blocked_ns", "sum"),
                    non_blocking_requested=("non_blocking_requested", "sum")).reset_index())
    grouped["gb_per_s"] = np.where(grouped["gpu_ns"] > 0, grouped["bytes"] / grouped["gpu_ns"].clip(lower=1), np.nan)
    return grouped.sort_values("count", ascending=False, kind="stable").reset_index(drop=True).astype(columns)
