"""Work per step: how much each traced step did, to judge every step rather than their median.

On a trace with GPU rows, a step's work is the GPU time of the kernels it launched (the union of their intervals:
CUDA graphs' kernels take the step of the graph's launch): a GPU is not shared with other processes mid-kernel. On
a CPU-only trace, time is not a measure: on a loaded machine an op's time includes the moments the process was
descheduled (two honest steps of chapter 01 differed 300-fold). There the work is a count: the backward pass's node
evaluations (``autograd::engine::evaluate_function: ...``) in the step, on any thread. A step that trains runs the
same backward as the next; a step that skipped its training, or ran its forward alone, runs none.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from checker.trace.intervals import union_length

WORK_COLUMNS = {"step": "int64", "work": "int64", "step_ns": "int64", "leaves": "int64"}
BACKWARD_NODE = "autograd::engine::evaluate_function"
LEAF_NODE = BACKWARD_NODE + ": torch::autograd::AccumulateGrad"  # a gradient stored into a trainable tensor


def step_work(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step: step, work (GPU kernel ns, or on a CPU trace backward nodes run), step_ns (the range's
    length), leaves (gradients stored into trainable tensors: AccumulateGrad nodes run, on any thread)."""
    rows = []
    gpu = events[events["device"].notna() & events["kind"].isin(["kernel", "memcpy", "memset"]) & events["step"].notna()]
    backward = events[(events["kind"] == "cpu_op") & events["step"].notna()
                      & events["name"].astype(str).str.startswith(BACKWARD_NODE)]
    counts = backward.groupby("step").size()
    leaves = backward[backward["name"].astype(str) == LEAF_NODE].groupby("step").size()
    for row in steps.itertuples():
        begin, end = int(row.start_ns), int(row.end_ns)
        if len(gpu):
            mine = gpu[gpu["step"] == row.step]
            work = union_length(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64))
        else:
            work = int(counts.get(row.step, 0))
        rows.append((int(row.step), int(work), end - begin, int(leaves.get(row.step, 0))))
    return pd.DataFrame(rows, columns=list(WORK_COLUMNS)).astype(WORK_COLUMNS)
