"""What changed between two traces of the same program: calls and GPU work that disappeared or
appeared, and the per-step numbers before and after.

Counts are per step (each trace's count over its own steps, or over the whole trace when it has none),
so traces of different lengths compare fairly. CUDA calls, kernels, copies and sets are compared by
name; when neither trace has CUDA calls (CPU-only traces), aten ops are compared instead.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DIFF_COLUMNS = {"kind": object, "name": object, "before_per_step": float, "after_per_step": float,
                "change_per_step": float, "status": object}
STATUS_ORDER = {"disappeared": 0, "appeared": 1, "fewer": 2, "more": 3}


def _per_step_counts(trace, kinds: tuple[str, ...]) -> pd.Series:
    events = trace.events
    rows = events[events["kind"].isin(kinds)]
    if trace.has_steps:
        rows = rows[rows["step"].notna()]
    steps = max(trace.step_count, 1)
    counts = rows.groupby([rows["kind"].astype(str), rows["name"].astype(str)]).size()
    return counts / steps


def event_diff(before, after) -> pd.DataFrame:
    """Names whose per-step count changed: kind, name, before_per_step, after_per_step, change_per_step,
    status (disappeared, appeared, fewer, more); disappeared first, then appeared, then by size of change."""
    cuda = before.has_cuda or after.has_cuda
    kinds = ("cuda_api", "kernel", "memcpy", "memset") if cuda else ("cpu_op",)
    b, a = _per_step_counts(before, kinds), _per_step_counts(after, kinds)
    table = pd.concat([b.rename("before_per_step"), a.rename("after_per_step")], axis=1).fillna(0.0)
    table["change_per_step"] = table["after_per_step"] - table["before_per_step"]
    table = table[np.abs(table["change_per_step"]) > 1e-9]
    if table.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in DIFF_COLUMNS.items()})
    status = np.select([table["after_per_step"] == 0, table["before_per_step"] == 0, table["change_per_step"] < 0],
                       ["disappeared", "appeared", "fewer"], "more")
    table = table.assign(status=status).rename_axis(["kind", "name"]).reset_index()
    table["_order"] = table["status"].map(STATUS_ORDER)
    table["_size"] = -np.abs(table["change_per_step"])
    table = table.sort_values(["_order", "_size", "kind", "name"], kind="stable")
    return table[list(DIFF_COLUMNS)].reset_index(drop=True).astype(DIFF_COLUMNS)


METRICS = (
    ("steps", "steps"),
    ("step_ms_median", "median step time (ms)"),
    ("host_syncs_per_step", "host syncs per step"),
    ("pageable_h2d_per_step", "pageable HtoD copies per step"),
    ("kernels_per_step", "kernels per step"),
    ("launches_per_step", "kernel launches per step"),
    ("gpu_idle_fraction", "GPU idle fraction"),
    ("data_wait_fraction", "data-loader wait fraction"),
)


def summary_diff(before: dict, after: dict) -> pd.DataFrame:
    """The per-step numbers of two summaries side by side: metric, label, before, after, change, ratio."""
    rows = []
    for key, label in METRICS:
        b, a = before.get(key), after.get(key)
        b = np.nan if b is None else float(b)
        a = np.nan if a is None else float(a)
        ratio = a / b if b and not np.isnan(b) else np.nan
        rows.append((key, label, b, a, a - b, ratio))
    return pd.DataFrame(rows, columns=["metric", "label", "before", "after", "change", "ratio"]).astype(
        {"metric": object, "label": object, "before": float, "after": float, "change": float, "ratio": float})
