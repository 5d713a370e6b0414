"""Collectives of a data-parallel job, read from each rank's trace: how many all-reduce rounds an optimizer step
makes, how much of the all-reduce time runs under backward, and how long each rank waits for the others.

One rank's trace shows its own collectives: on a CPU (gloo) a ``gloo:all_reduce`` range on gloo's thread, on a
GPU (NCCL) an ``ncclDevKernel_AllReduce...`` kernel; either lasts from the moment this rank arrived until every
rank had. Matched in order across the ranks' traces (every rank makes the same collectives in the same order),
the one that lasted least is the transfer itself, and what a rank spent beyond it is its wait for a later rank.
Compared by duration, not by timestamp, so no two processes' clocks need to agree.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from checker.trace.intervals import merge

# a collective as it runs: gloo's range on its own thread; NCCL's kernel on the GPU
COLLECTIVE_RUN = re.compile(r"^gloo:all_?reduce|^nccl(?:Dev)?Kernel_AllReduce|^ncclKernel_AllReduce", re.IGNORECASE)
# where the host asks for one: the c10d op DDP's reducer (or the script) calls
COLLECTIVE_CALL = re.compile(r"^c10d::allreduce", re.IGNORECASE)
DDP_FORWARD = "DistributedDataParallel.forward"
# GPU kernels that are not compute: the collectives themselves and copies
_NOT_COMPUTE = re.compile(r"nccl|Memcpy|Memset", re.IGNORECASE)

_WAIT_COLUMNS = {"rank": "int64", "step": "int64", "collectives": "int64", "collective_ns": "int64",
                 "wait_ns": "int64", "step_ns": "int64", "wait_share": "float64"}


def collective_runs(events: pd.DataFrame) -> pd.DataFrame:
    """The all-reduces as they ran, inside steps, in order: step, start_ns, end_ns, dur_ns."""
    found = events[events["step"].notna() & events["kind"].isin(["range", "kernel"])
                   & events["name"].str.contains(COLLECTIVE_RUN)]
    found = found.sort_values("start_ns")
    return pd.DataFrame({"step": found["step"].astype("int64"), "start_ns": found["start_ns"].astype("int64"),
                         "end_ns": found["end_ns"].astype("int64"),
                         "dur_ns": (found["end_ns"] - found["start_ns"]).astype("int64")}).reset_index(drop=True)


def allreduce_rounds(events: pd.DataFrame) -> pd.DataFrame:
    """Per step: the all-reduce calls, the model's forward passes (micro-batches), and the rounds: how many of
    those micro-batches' backward passes all-reduced. A step that all-reduces once holds one round."""
    steps = sorted(int(s) for s in events.loc[events["step"].notna(), "step"].unique())
    rows = []
    for step in steps:
        mine = events[(events["step"] == step)]
        calls = mine[(mine["kind"] == "cpu_op") & mine["name"].str.contains(COLLECTIVE_CALL)]["start_ns"].to_numpy()
        forwards = np.sort(mine[(mine["kind"] == "range") & (mine["name"] == DDP_FORWARD)]["start_ns"].to_numpy())
        if len(forwards):
            segment = np.searchsorted(forwards, calls, side="right")  # 0: before the first forward
            rounds = len(np.unique(segment))
        else:
            rounds = int(len(calls) > 0)
        rows.append((step, len(calls), len(forwards), rounds))
    return pd.DataFrame(rows, columns=["step", "allreduce_calls", "forwards", "rounds"]).astype("int64")


def overlap_share(events: pd.DataFrame) -> pd.DataFrame:
    """Per step (GPU traces): the all-reduce kernels' time, and the share of it during which a compute kernel
    ran on the GPU too: communication hidden under backward."""
    rows = []
    kernels = events[(events["kind"] == "kernel") & events["step"].notna()]
    for step, mine in kernels.groupby("step"):
        comm = mine[mine["name"].str.contains(COLLECTIVE_RUN)]
        compute = mine[~mine["name"].str.contains(_NOT_COMPUTE)]
        comm_s, comm_e = merge(comm["start_ns"].to_numpy(np.int64), comm["end_ns"].to_numpy(np.int64))
        comp_s, comp_e = merge(compute["start_ns"].to_numpy(np.int64), compute["end_ns"].to_numpy(np.int64))
        total = int((comm_e - comm_s).sum())
        hidden = 0
        for s, e in zip(comm_s, comm_e):
            lo, hi = np.clip(comp_s, s, e), np.clip(comp_e, s, e)
            hidden += int((hi - lo).sum())
        rows.append((int(step), total, hidden, hidden / total if total else float("nan")))
    return pd.DataFrame(rows, columns=["step", "allreduce_ns", "hidden_ns", "hidden_share"]).astype(
        {"step": "int64", "allreduce_ns": "int64", "hidden_ns": "int64", "hidden_share": "float64"})


def rank_waits(traces: list, exclude_steps=()) -> pd.DataFrame:
    """Per rank and step: its collectives' time, the part of it spent waiting for a later rank, and that wait as
    a share of the step. ``traces`` are TraceAnalysis objects, rank 0 first, over the same steps."""
    runs = [collective_runs(t.events) for t in traces]
    steps = [t.get_steps().set_index("step") for t in traces]
    common = sorted(set.intersection(*(set(int(s) for s in frame.index) for frame in steps)) - set(exclude_steps))
    rows = []
    for step in common:
        per_rank = [r[r["step"] == step]["dur_ns"].to_numpy(np.int64) for r in runs]
        count = min(len(d) for d in per_rank)
        least = np.min(np.stack([d[:count] for d in per_rank]), axis=0) if count else np.zeros(0, np.int64)
        for rank, durations in enumerate(per_rank):
            wait = int((durations[:count] - least).sum())
            step_ns = int(steps[rank].loc[step, "dur_ns"])
            rows.append((rank, step, len(durations), int(durations.sum()), wait, step_ns,
                         wait / step_ns if step_ns else 0.0))
    frame = pd.DataFrame(rows, columns=list(_WAIT_COLUMNS))
    return frame.astype(_WAIT_COLUMNS)


def straggler_summary(waits: pd.DataFrame) -> dict:
    """Each rank's median wait share over the steps; the rank that waited most, and the straggler it waited for
    (the rank that waited least)."""
    if waits.empty:
        return {"ranks": {}, "waiting_rank": None, "straggler": None, "worst_share": None}
    medians = waits.groupby("rank")["wait_share"].median()
    wait_ms = waits.groupby("rank")["wait_ns"].median() / 1e6
    step_ms = waits.groupby("rank")["step_ns"].median() / 1e6
    return {"ranks": {int(r): {"wait_share": round(float(medians[r]), 3), "wait_ms": round(float(wait_ms[r]), 3),
                               "step_ms": round(float(step_ms[r]), 3)} for r in medians.index},
            "waiting_rank": int(medians.idxmax()), "straggler": int(medians.idxmin()),
            "worst_share": round(float(medians.max()), 3)}


def ops_per_step(events: pd.DataFrame) -> float:
    """The median count of recorded CPU ops per step, collectives aside: the work a rank asked for, counted, which
    a busy machine's scheduling cannot change (a CPU's timings can be)."""
    ops = events[events["step"].notna() & (events["kind"] == "cpu_op") & ~events["name"].str.contains(COLLECTIVE_CALL)]
    counts = ops.groupby("step").size()
    return float(counts.median()) if len(counts) else 0.0
