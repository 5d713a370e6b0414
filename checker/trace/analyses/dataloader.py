"""Data-loader wait: how long each step waited for its batch.

The workbook's harness fetches each batch inside a range named ``data`` nested in the step's range
(NVTX and record_function alike). Where a trace has no ``data`` ranges, torch.profiler's own ranges
around a DataLoader's ``__next__`` (``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``)
are used instead. Overlapping ranges of one step count once.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from checker.trace.intervals import merge

DATA_RANGE = "data"
LOADER_NEXT = re.compile(r"DataLoader.*__next__")
WAIT_COLUMNS = {"step": "int64", "step_ns": "int64", "data_wait_ns": "int64", "data_wait_fraction": float,
                "source": object}


def data_wait(events: pd.DataFrame, steps: pd.DataFrame, exclude_steps=()) -> pd.DataFrame:
    """One row per step: step_ns, data_wait_ns, data_wait_fraction, source (which ranges were used)."""
    excluded = {int(x) for x in exclude_steps}
    steps = steps[~steps["step"].isin(excluded)]
    host = events[events["device"].isna() & events["step"].notna()]
    ranges = host[(host["kind"] == "range") & (host["name"] == DATA_RANGE)]
    source = "data range"
    if ranges.empty:
        candidates = host[host["kind"].isin(("range", "cpu_op"))]
        names = [n for n in candidates["name"].unique() if LOADER_NEXT.search(str(n))]
        ranges = candidates[candidates["name"].isin(names)]
        source = "DataLoader __next__" if len(ranges) else "none"
    waits = {}
    for step, group in ranges.groupby("step"):
        s, e = merge(group["start_ns"].to_numpy(), group["end_ns"].to_numpy())
        waits[int(step)] = int((e - s).sum())
    wait = np.array([waits.get(int(s), 0) for s in steps["step"]], dtype=np.int64)
    dur = steps["dur_ns"].to_numpy(dtype=np.int64)
    return pd.DataFrame({
        "step": steps["step"].to_numpy(dtype=np.int64),
        "step_ns": dur,
        "data_wait_ns": wait,
        "data_wait_fraction": np.where(dur > 0, wait / np.maximum(dur, 1), np.nan),
        "source": source,
    }).astype(WAIT_COLUMNS)
