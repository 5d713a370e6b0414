"""The CUDA runtime calls behind GPU work: which call launched a kernel or a copy, and what the same thread called
next (a sync after a copy, say). Shared by the copies, syncs, idle-time and count analyses."""

from __future__ import annotations

import numpy as np
import pandas as pd


def launch_rows(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For GPU rows, the row of the cuda_api call with the same (process, correlation id), or -1."""
    api = np.flatnonzero(((events["kind"] == "cuda_api") & events["correlation"].notna()).to_numpy())
    out = np.full(len(rows), -1, dtype=np.int64)
    if not len(api) or not len(rows):
        return out
    pid = events["pid"].to_numpy()
    corr = events["correlation"].to_numpy(dtype=np.int64, na_value=-1)
    index = pd.Series(api, index=pd.MultiIndex.from_arrays([pid[api], corr[api]]))
    index = index[~index.index.duplicated()]
    found = index.reindex(pd.MultiIndex.from_arrays([pid[rows], corr[rows]]))
    return found.fillna(-1).to_numpy(dtype=np.int64)


def next_call_rows(events: pd.DataFrame, calls: np.ndarray) -> np.ndarray:
    """For cuda_api rows, the next cuda_api row on the same thread, or -1 (one sort, whatever the threads)."""
    out = np.full(len(calls), -1, dtype=np.int64)
    api = np.flatnonzero((events["kind"] == "cuda_api").to_numpy())
    if not len(api) or not len(calls):
        return out
    tid = events["tid"].to_numpy()[api]
    pid = events["pid"].to_numpy()[api]
    order = np.lexsort((api, tid, pid))  # by thread, then table order (start order) within it
    ranked, same = api[order], (pid[order][1:] == pid[order][:-1]) & (tid[order][1:] == tid[order][:-1])
    following = np.full(len(api), -1, dtype=np.int64)
    following[:-1] = np.where(same, ranked[1:], -1)
    after = np.full(len(events), -1, dtype=np.int64)
    after[ranked] = following
    calls = np.asarray(calls, dtype=np.int64)
    valid = calls >= 0
    out[valid] = after[calls[valid]]
    return out
