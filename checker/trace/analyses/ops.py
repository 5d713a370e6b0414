"""Where the host's time goes, op by op: count, self time and total time of each CPU op per step.

Self time is an op's duration less the durations of the CPU ops directly inside it on the same thread,
as torch.profiler's ``key_averages()`` table counts "Self CPU" (CUDA runtime calls made inside an op are
part of its self time here; they are their own rows in the trace's CUDA API row). An op that overlaps
the op it starts in without ending inside it (a damaged trace) is taken as inside it; a self time is never
below 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from checker.trace.intervals import clip, union_length
from checker.trace.steps import rows_in_steps

OP_COLUMNS = {"name": object, "count": "int64", "self_ns": "int64", "total_ns": "int64", "count_per_step": float,
              "self_ms_per_step": float, "total_ms_per_step": float}


CPU_OP_COLUMNS = {"step": "Int64", "name": object, "pid": "int64", "tid": "int64", "start_ns": "int64",
                  "end_ns": "int64", "self_ns": "int64", "top_level": bool}


def cpu_ops(events: pd.DataFrame, in_steps: bool, exclude_steps=()) -> pd.DataFrame:
    """One row per CPU op (inside a step when in_steps): step, name, pid, tid, start_ns, end_ns, self_ns, and
    top_level (no CPU op of its thread holds it). Typed columns even when there are no rows."""
    rows = np.flatnonzero((events["kind"] == "cpu_op").to_numpy())
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in CPU_OP_COLUMNS.items()})
    self_ns, parent = _nesting(events, rows)
    keep = np.isin(rows, rows_in_steps(events, rows, exclude_steps)) if in_steps else np.ones(len(rows), dtype=bool)
    sub = events.iloc[rows[keep]]
    frame = pd.DataFrame({"step": sub["step"].to_numpy(), "name": sub["name"].astype(str).to_numpy(),
                          "pid": sub["pid"].to_numpy(), "tid": sub["tid"].to_numpy(),
                          "start_ns": sub["start_ns"].to_numpy(), "end_ns": sub["end_ns"].to_numpy(),
                          "self_ns": self_ns[keep], "top_level": parent[keep] < 0})
    return frame.astype(CPU_OP_COLUMNS)


def empty_ops() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in OP_COLUMNS.items()})


def self_times(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Self time (ns) of each cpu_op row in rows (rows in table order: by start, holders first)."""
    return _nesting(events, rows)[0]


def _nesting(events: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(self time, position in rows of the op directly holding it or -1) of each row."""
    starts = events["start_ns"].to_numpy()[rows]
    ends = events["end_ns"].to_numpy()[rows]
    threads = [events["pid"].to_numpy()[rows], events["tid"].to_numpy()[rows]]
    parent = np.full(len(rows), -1, dtype=np.int64)
    for members in pd.Series(np.arange(len(rows))).groupby(threads).indices.values():
        stack: list[int] = []
        s_list, e_list = starts[members].tolist(), ends[members].tolist()
        for k, i in enumerate(members.tolist()):
            s = s_list[k]
            while stack and e_list[stack[-1]] <= s:
                stack.pop()
            if stack:
                parent[i] = members[stack[-1]]
            stack.append(k)
    dur = (ends - starts).astype(np.int64)
    has_parent = parent >= 0
    children = np.bincount(parent[has_parent], weights=dur[has_parent], minlength=len(rows))
    return np.maximum(dur - children.astype(np.int64), 0), parent


def direct_holders(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(rows of every CPU op, row of the CPU op directly holding each on its thread or -1)."""
    rows = np.flatnonzero((events["kind"] == "cpu_op").to_numpy())
    if not len(rows):
        return rows, rows
    parent = _nesting(events, rows)[1]
    return rows, np.where(parent >= 0, rows[np.maximum(parent, 0)], -1)


def top_ops(events: pd.DataFrame, in_steps: bool, counted_steps: int, exclude_steps=(), limit: int | None = 15,
            sort_by: str = "self_ns") -> pd.DataFrame:
    """CPU ops by name: count, self_ns, total_ns and each per step; sorted by sort_by ('self_ns' or 'count')."""
    rows = np.flatnonzero((events["kind"] == "cpu_op").to_numpy())
    if not len(rows):
        return empty_ops()
    self_ns = self_times(events, rows)  # over every op of the thread, so that nesting is seen whole
    if in_steps:
        kept = rows_in_steps(events, rows, exclude_steps)
        keep = np.isin(rows, kept)
        rows, self_ns = rows[keep], self_ns[keep]
    if not len(rows):
        return empty_ops()
    frame = pd.DataFrame({"name": events["name"].astype(str).to_numpy()[rows], "self_ns": self_ns,
                          "total_ns": (events["end_ns"] - events["start_ns"]).to_numpy()[rows]})
    grouped = frame.groupby("name", sort=False).agg(count=("self_ns", "size"), self_ns=("self_ns", "sum"),
                                                    total_ns=("total_ns", "sum")).reset_index()
    steps = max(counted_steps, 1)
    grouped["count_per_step"] = grouped["count"] / steps
    grouped["self_ms_per_step"] = grouped["self_ns"] / 1e6 / steps
    grouped["total_ms_per_step"] = grouped["total_ns"] / 1e6 / steps
    order = ["count", "self_ns"] if sort_by == "count" else ["self_ns", "count"]
    grouped = grouped.sort_values(order + ["name"], ascending=[False, False, True], kind="stable")
    if limit is not None:
        grouped = grouped.head(limit)
    return grouped[list(OP_COLUMNS)].reset_index(drop=True).astype(OP_COLUMNS)


def uncovered_shares(events: pd.DataFrame, steps: pd.DataFrame) -> pd.Series:
    """Each step's share (0-1) of its range's time in which no CPU op ran on the thread that opened the range,
    indexed by step. On a CPU an op has finished when its call returns, so a training step's time is its ops' time
    and a little Python between them; a step slept or spun to a beat (a sleep, a loop on the clock) holds that time
    between its ops. Steps without a range's thread or length are left out."""
    ops = cpu_ops(events, in_steps=True)
    ops = ops[ops["top_level"].to_numpy(bool)]
    by_step = {int(step): group for step, group in ops.groupby("step")}
    shares = {}
    for row in steps.itertuples(index=False):
        start, end = int(row.start_ns), int(row.end_ns)
        if end <= start:
            continue
        mine = by_step.get(int(row.step))
        if mine is not None:
            mine = mine[(mine["pid"].to_numpy() == row.pid) & (mine["tid"].to_numpy() == row.tid)]
        covered = 0 if mine is None or mine.empty else union_length(
            *clip(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64), start, end))
        shares[int(row.step)] = 1.0 - covered / (end - start)
    return pd.Series(shares, dtype=float)
