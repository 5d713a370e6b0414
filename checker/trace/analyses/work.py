"""Work per step: how much each traced step did, to judge every step rather than their median.

On a trace with GPU rows, a step's work is the GPU time of the kernels it launched (the union of their intervals:
CUDA graphs' kernels take the step of the graph's launch). On a CPU-only trace it is the time recorded PyTorch ops
cover in the step on any thread, the step's ``data`` range (fetching its batch) left out: a step that fetched its
batch and trained on nothing shows almost none.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from checker.trace.intervals import merge

WORK_COLUMNS = {"step": "int64", "work_ns": "int64", "step_ns": "int64"}


def _union_ns(starts: np.ndarray, ends: np.ndarray, begin: int | None = None, end: int | None = None) -> int:
    if not len(starts):
        return 0
    if begin is not None:
        starts, ends = np.clip(starts, begin, end), np.clip(ends, begin, end)
    s, e = merge(starts, ends)
    return int((e - s).sum())


def step_work(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step: step, work_ns (by the rules in this module's docstring), step_ns (the range's length)."""
    rows = []
    gpu = events[events["device"].notna() & events["kind"].isin(["kernel", "memcpy", "memset"]) & events["step"].notna()]
    data = events[(events["kind"] == "range") & (events["name"] == "data")]
    ops = events[(events["kind"] == "cpu_op") & events["step"].notna()]
    for row in steps.itertuples():
        begin, end = int(row.start_ns), int(row.end_ns)
        if len(gpu):
            mine = gpu[gpu["step"] == row.step]
            work = _union_ns(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64))
        else:
            mine = ops[ops["step"] == row.step]
            work = _union_ns(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64), begin, end)
            fetch = data[(data["start_ns"] >= begin) & (data["start_ns"] < end)]
            if len(fetch):  # ops inside the data range fetched the batch: not the step's training
                inside = mine[(mine["start_ns"] >= fetch["start_ns"].min()) & (mine["end_ns"] <= fetch["end_ns"].max())]
                work -= _union_ns(inside["start_ns"].to_numpy(np.int64), inside["end_ns"].to_numpy(np.int64))
        rows.append((int(row.step), max(int(work), 0), end - begin))
    return pd.DataFrame(rows, columns=list(WORK_COLUMNS)).astype(WORK_COLUMNS)
