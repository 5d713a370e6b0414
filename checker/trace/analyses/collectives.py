"""Collectives of a data-parallel job, read from each rank's trace: how many all-reduce rounds an optimizer step
makes, which gradient buckets go out while backward still computes, how long each rank waits for the others, and
how much work each rank did per step (to tell a rank that did more from a rank that was only late).

One rank's trace shows its own collectives: on a CPU (gloo) a ``gloo:all_reduce`` range on gloo's thread, on a
GPU (NCCL) an ``ncclDevKernel_AllReduce...`` kernel; either lasts from the moment this rank arrived until every
rank had. Matched in order across the ranks' traces (every rank makes the same collectives in the same order),
the one that lasted least is the transfer itself, and what a rank spent beyond it is its wait for a later rank.
Compared by duration, not by timestamp, so no two processes' clocks need to agree.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from checker.trace.intervals import merge, points_within, union_length

# a collective as it runs: gloo's range on its own thread; NCCL's kernel on the GPU
COLLECTIVE_RUN = re.compile(r"^gloo:all_?reduce|^nccl(?:Dev)?Kernel_AllReduce|^ncclKernel_AllReduce", re.IGNORECASE)
# where the host asks for one: the c10d op DDP's reducer (or the script) calls
COLLECTIVE_CALL = re.compile(r"^c10d::allreduce", re.IGNORECASE)
DDP_FORWARD = "DistributedDataParallel.forward"
# a node of the backward graph that computes gradients; AccumulateGrad only stores one (DDP's hooks run inside it:
# the copy into a bucket and, when the bucket is full, the all-reduce call)
BACKWARD_NODE = re.compile(r"^autograd::engine::evaluate_function: (?!torch::autograd::AccumulateGrad)")
# what the host is seen doing: the recorded ops and CUDA calls; a Python range (`record_function`) is not work seen
_HOST_SEEN = ("cpu_op", "cuda_api", "sync")
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
        forwards = _forward_starts(mine)
        if len(forwards):
            segment = np.searchsorted(forwards, calls, side="right")  # 0: before the first forward
            rounds = len(np.unique(segment))
        else:
            rounds = int(len(calls) > 0)
        # the bursts of all-reduce calls split by backward passes: the collectives themselves, no range needed
        rounds = max(rounds, allreduce_bursts(mine))
        _nodes, passes = backward_passes(mine)
        micro = max(len(forwards), int(passes.max()) + 1 if len(passes) else 0)
        rows.append((step, len(calls), micro, rounds))
    return pd.DataFrame(rows, columns=["step", "allreduce_calls", "forwards", "rounds"]).astype("int64")


def _forward_starts(mine: pd.DataFrame) -> np.ndarray:
    """Where a step's micro-batches begin: its DDP forward passes' starts, sorted."""
    return np.sort(mine[(mine["kind"] == "range") & (mine["name"] == DDP_FORWARD)]["start_ns"].to_numpy(np.int64))


# the sizes of what a step communicated (``meta["sized"]``, the profiler's record_shapes): the collectives as the
# host asks for them, all-reduces and the others; as the backend runs them (gloo's and NCCL's host ranges); the
# gradients backward stores
_ALLREDUCE_OP = re.compile(r"^c10d::allreduce")
_COLLECTIVE_OP = re.compile(r"^c10d::")
_BACKEND_RUN = re.compile(r"^(?:gloo|nccl):")
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
_VOLUME_COLUMNS = {"step": "int64", "allreduce_calls": "int64", "other_calls": "int64", "unsized_calls": "int64",
                   "allreduce_elements": "int64", "other_elements": "int64", "run_elements": "int64",
                   "elements": "int64", "gradient_elements": "float64"}


def sized_events(trace) -> pd.DataFrame:
    """The sized events of a trace's steps (``meta["sized"]``): step, name, start_ns, end_ns, tid, elements (-1:
    no size recorded), each in the step whose range holds its start. A c10d op inside another of its thread (an op
    that calls another) is that one's, and a backend's range inside another backend range likewise: left out (a
    backend's range inside a c10d op is kept: the two are counted apart)."""
    found = (getattr(trace, "meta", None) or {}).get("sized") or {}
    columns = ["step", "name", "start_ns", "end_ns", "tid", "elements"]
    steps = trace.get_steps()
    if not found.get("start_ns") or steps.empty:
        return pd.DataFrame(columns=columns + ["products"])
    starts = np.asarray(found["start_ns"], dtype=np.int64)
    ends = starts + np.asarray(found["dur_ns"], dtype=np.int64)
    tids = np.asarray(found["tid"], dtype=np.int64)
    names = np.asarray(found["name"], dtype=object)
    elements = np.asarray(found["elements"], dtype=np.int64)
    nested = np.zeros(len(starts), dtype=bool)
    for pattern in (_COLLECTIVE_OP, _BACKEND_RUN):
        mine = np.array([bool(pattern.match(n)) for n in names], dtype=bool)
        nested[mine] = _inside_other(starts[mine], ends[mine], tids[mine])
    step = np.full(len(starts), -1, dtype=np.int64)
    for row in steps.itertuples():
        step[(starts >= row.start_ns) & (starts < row.end_ns)] = int(row.step)
    keep = (step >= 0) & ~nested
    return pd.DataFrame({"step": step[keep], "name": names[keep], "start_ns": starts[keep], "end_ns": ends[keep],
                         "tid": tids[keep], "elements": elements[keep]})


def collective_volume(trace) -> pd.DataFrame:
    """Per traced step: the elements the rank communicated, from the sizes its trace recorded. allreduce_elements:
    the c10d all-reduce calls' tensors (DDP's buckets, a script's own dist.all_reduce); other_elements: the other
    c10d collectives' (all-gather, broadcast, reduce, send...: each the largest tensor set it carries); run_elements:
    every collective as the backend ran it (gloo's and NCCL's host ranges, which a backend called past the c10d op
    makes too); elements: the larger of the calls' sum and the runs'. unsized_calls: collective calls with no size
    recorded (a trace without record_shapes): the step's volume is then unknown. gradient_elements: the gradients
    one backward pass stored (AccumulateGrad's sizes over the step's backward passes), the model's size as the
    trace shows it; NaN in a step without them."""
    sized = sized_events(trace)
    events = trace.events
    rows = []
    for step in sorted(int(s) for s in trace.get_steps()["step"].unique()):
        mine = sized[sized["step"] == step]
        calls = mine[mine["name"].str.match(_COLLECTIVE_OP)]
        allreduce = calls[calls["name"].str.match(_ALLREDUCE_OP)]
        other = calls[~calls["name"].str.match(_ALLREDUCE_OP)]
        runs = mine[mine["name"].str.match(_BACKEND_RUN)]
        ar = int(allreduce["elements"].clip(lower=0).sum())
        ot = int(other["elements"].clip(lower=0).sum())
        run = int(runs["elements"].clip(lower=0).sum())
        grads = mine[mine["name"] == ACCUMULATE_GRAD]["elements"]
        _nodes, passes = backward_passes(events[events["step"] == step])
        count = int(passes.max()) + 1 if len(passes) else 0
        gradient = float(grads.clip(lower=0).sum()) / count if count and len(grads) else float("nan")
        rows.append((step, len(allreduce), len(other), int((calls["elements"] < 0).sum()), ar, ot, run,
                     max(ar + ot, run), gradient))
    return pd.DataFrame(rows, columns=list(_VOLUME_COLUMNS)).astype(_VOLUME_COLUMNS)


def model_gradient_elements(in_features: int, width: int, layers: int, classes: int) -> int:
    """The gradient elements of chapter 09's MLP (``layers`` linear layers of ``width``, then a head), biases
    included: what one all-reduce of the whole gradient carries."""
    dims = [(in_features, width)] + [(width, width)] * (layers - 1) + [(width, classes)]
    return int(sum(i * o + o for i, o in dims))


def bucket_launches(events: pd.DataFrame) -> pd.DataFrame:
    """Per step: the all-reduce calls (one per DDP gradient bucket), and how many of them the host made while the
    backward pass of their micro-batch still had gradients to compute: before the start of that micro-batch's last
    backward node that computes (not AccumulateGrad). DDP's default buckets go out as backward fills them, all
    but the last before backward's end; one bucket holding every gradient goes out only after the last node.

    Read from the host's order of events alone, in the rank's own clock: neither a host-bound trace (the GPU
    idle between launches) nor a wait for another rank changes it. A call outside any backward (a script's own
    all_reduce after backward) is never early."""
    rows = []
    for step, mine in events[events["step"].notna()].groupby("step"):
        calls = mine[(mine["kind"] == "cpu_op") & mine["name"].str.contains(COLLECTIVE_CALL)]["start_ns"]
        calls = calls.to_numpy(np.int64)
        nodes = mine[(mine["kind"] == "cpu_op") & mine["name"].str.contains(BACKWARD_NODE)]["start_ns"]
        nodes = nodes.to_numpy(np.int64)
        forwards = _forward_starts(mine)
        call_segment = np.searchsorted(forwards, calls, side="right")
        node_segment = np.searchsorted(forwards, nodes, side="right")
        early = 0
        for segment in np.unique(call_segment):
            in_segment = nodes[node_segment == segment]
            if len(in_segment):
                early += int((calls[call_segment == segment] < in_segment.max()).sum())
        rows.append((int(step), len(calls), early, early / len(calls) if len(calls) else float("nan")))
    return pd.DataFrame(rows, columns=["step", "allreduce_calls", "early_calls", "early_share"]).astype(
        {"step": "int64", "allreduce_calls": "int64", "early_calls": "int64", "early_share": "float64"})


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
    """Each rank's median wait share over the steps; the rank that waited most, and the late rank it waited for
    (the rank that waited least). Whether the late rank is a straggler, late because it did more, is
    :func:`extra_work`'s to say."""
    if waits.empty:
        return {"ranks": {}, "waiting_rank": None, "late_rank": None, "worst_share": None}
    medians = waits.groupby("rank")["wait_share"].median()
    wait_ms = waits.groupby("rank")["wait_ns"].median() / 1e6
    step_ms = waits.groupby("rank")["step_ns"].median() / 1e6
    return {"ranks": {int(r): {"wait_share": round(float(medians[r]), 3), "wait_ms": round(float(wait_ms[r]), 3),
                               "step_ms": round(float(step_ms[r]), 3)} for r in medians.index},
            "waiting_rank": int(medians.idxmax()), "late_rank": int(medians.idxmin()),
            "worst_share": round(float(medians.max()), 3)}


def compute_kernel_ms_per_step(events: pd.DataFrame) -> float | None:
    """The median GPU time of compute kernels per step (collectives and copies aside), in ms; None in a trace
    without kernels. What the GPU was asked to compute: a wait for another rank does not lengthen it."""
    kernels = events[events["step"].notna() & (events["kind"] == "kernel")]
    if kernels.empty:
        return None
    compute = kernels[~kernels["name"].str.contains(_NOT_COMPUTE)]
    per_step = (compute["end_ns"] - compute["start_ns"]).groupby(compute["step"]).sum()
    per_step = per_step.reindex(sorted(kernels["step"].unique()), fill_value=0)
    return float(per_step.median()) / 1e6


# Inductor's C++ kernels, as the profiler's Python tracer names each call of one from a compiled graph's code (CPU)
COMPILED_KERNEL_CALL = "<built-in function kernel>"


def compiled_kernel_ms_per_step(events: pd.DataFrame) -> float | None:
    """The median host time per step in calls of Inductor's C++ kernels (a CPU trace's compiled graphs), in ms; None
    in a trace without Python events. A compiled graph's call is one recorded op whatever it computes, its kernels
    record none: a rank that evaluates the model alone in one compiled call every step makes a few ops more and
    multiplies nothing the trace's shapes show (red team 61's compiled_eval_09), but its kernels take the time."""
    python = events[events["kind"] == "python"]
    if python.empty:
        return None
    steps = sorted(events.loc[events["step"].notna(), "step"].unique())
    calls = python[python["step"].notna() & (python["name"] == COMPILED_KERNEL_CALL)]
    per_step = (calls["end_ns"] - calls["start_ns"]).groupby(calls["step"]).sum().reindex(steps, fill_value=0)
    return float(per_step.median()) / 1e6 if len(per_step) else 0.0


def _in_collectives(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The host inside its collectives (gloo, CPU): from each all-reduce call's start to the first op its thread
    starts after the all-reduce ran (calls and gloo's runs matched in order). That covers the run and the thread's
    waking from it: on a busy CPU a thread that slept on a collective can take milliseconds to run again, time no
    op records and no work of the script's. NCCL's runs are GPU kernels the host does not wait on: nothing here."""
    ops = events[events["kind"] == "cpu_op"]
    calls = ops[ops["name"].str.contains(COLLECTIVE_CALL)].sort_values("start_ns")
    runs = events[events["device"].isna() & (events["kind"] == "range")
                  & events["name"].str.contains(COLLECTIVE_RUN)].sort_values("start_ns")
    count = min(len(calls), len(runs))
    if not count:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    by_thread = {tid: np.sort(mine["start_ns"].to_numpy(np.int64)) for tid, mine in ops.groupby("tid")}
    starts = calls["start_ns"].to_numpy(np.int64)[:count]
    run_ends = runs["end_ns"].to_numpy(np.int64)[:count]
    ends = run_ends.copy()
    for i, tid in enumerate(calls["tid"].to_numpy()[:count]):
        later = by_thread[tid]
        j = np.searchsorted(later, run_ends[i])
        if j < len(later):
            ends[i] = max(later[j], run_ends[i])
    return starts, ends


def unseen_host_ms_per_step(trace) -> float | None:
    """The median host time per step in which the profiler saw the process do nothing: the step's range less the
    union of every thread's recorded ops and CUDA calls and of its time inside collectives (:func:`_in_collectives`),
    in ms. Python between ops is here, and so is work done out of the profiler's sight (numpy, a C extension); a
    wait for another rank is not. None without steps."""
    steps = trace.get_steps()
    if steps.empty:
        return None
    events = trace.events
    seen = events[events["kind"].isin(_HOST_SEEN) & events["device"].isna()]
    inside_s, inside_e = _in_collectives(events)
    starts = np.concatenate([seen["start_ns"].to_numpy(np.int64), inside_s])
    ends = np.concatenate([seen["end_ns"].to_numpy(np.int64), inside_e])
    unseen = []
    for row in steps.itertuples():
        inside = (starts < row.end_ns) & (ends > row.start_ns)
        covered = union_length(np.clip(starts[inside], row.start_ns, row.end_ns),
                               np.clip(ends[inside], row.start_ns, row.end_ns))
        unseen.append(row.dur_ns - covered)
    return float(np.median(unseen)) / 1e6


def input_elements_per_step(trace) -> float | None:
    """The median over steps of the input elements of every recorded CPU op that starts in the step (the trace's
    shapes, record_shapes; ``meta["op_inputs"]``), in millions: what a rank asked of its ops, whatever they are named
    and however busy the machine (red team 27's rank 0 evaluated 8,192 rows through torch.cdist, no product). None
    where the trace recorded no shapes."""
    by_step = input_elements_by_step(trace)
    return None if by_step is None else float(by_step.median())


def input_elements_by_step(trace) -> pd.Series | None:
    """Each step's input elements of its recorded CPU ops, in millions, indexed by step (None: no shapes recorded)."""
    summed = _op_inputs_by_step(trace, "elements", np.float64)
    return None if summed is None else summed / 1e6


def input_shapes_by_step(trace) -> pd.Series | None:
    """Each step's recorded CPU ops with their input shapes, as one number per step (a sum of each op's crc32 of its
    name and Input Dims), indexed by step (None: no shapes recorded). Two steps that ran the same ops on the same
    shapes, in any order, get the same number; the inputs' total (``input_elements_by_step``) can agree where the
    shapes do not (red team 54's peekshape_06: a data-sized narrow that made a copy or a view)."""
    return _op_inputs_by_step(trace, "shapes", np.int64)


def _op_inputs_by_step(trace, key: str, dtype) -> pd.Series | None:
    """The sum over each step's recorded CPU ops of ``meta["op_inputs"][key]`` (every op that starts in the step),
    indexed by step; None where the trace recorded no shapes."""
    found = (getattr(trace, "meta", None) or {}).get("op_inputs") or {}
    steps = trace.get_steps()
    if not found.get("start_ns") or not found.get(key) or steps.empty:
        return None
    starts = np.asarray(found["start_ns"], dtype=np.int64)
    values = np.asarray(found[key], dtype=dtype)
    order = np.argsort(starts, kind="stable")
    starts, totals = starts[order], np.concatenate([np.zeros(1, dtype=dtype), np.cumsum(values[order])])
    lo = np.searchsorted(starts, steps["start_ns"].to_numpy(np.int64), side="left")
    hi = np.searchsorted(starts, steps["end_ns"].to_numpy(np.int64), side="left")
    return pd.Series(totals[hi] - totals[lo], index=steps["step"].to_numpy(np.int64))


# When a wait is a straggler's: the late rank did measurably more per step than the rank that waited for it. Two
# ranks running the same code differ by none of these but by chance (a profiled host that runs slower, a process
# the scheduler set aside); a rank that evaluates, logs or reads values alone differs by all that work.
FLOPS_MARGIN = 0.10  # matrix-multiply FLOPs per step (recorded shapes), as a share of the waiting rank's
OPS_MARGIN = 16  # recorded ops per step: a loss read is 2, an evaluation of the model 50 and more
KERNEL_MARGIN = 0.10  # compute-kernel time per step, as a share of the waiting rank's (GPU traces)
ELEMENTS_MARGIN = 0.10  # recorded ops' input elements per step, as a share of the waiting rank's (CPU traces)
UNSEEN_SHARE_OF_WAIT = 0.5  # host time the profiler saw nothing in, beyond the waiting rank's: half the wait...
UNSEEN_RATIO = 2.0  # ...and twice the waiting rank's (Python between ops is there on every rank)


def work_per_step(trace) -> dict:
    """What one rank did per step, medians over its traced steps: recorded ops (counted), compute-kernel ms (GPU
    traces; else None) and host ms the profiler saw nothing in."""
    kernel_ms = compute_kernel_ms_per_step(trace.events)
    unseen_ms = unseen_host_ms_per_step(trace)
    matmuls = matmul_work(trace)
    mflops = float(matmuls["matmul_flops"].median()) / 1e6 if len(matmuls) else None
    # on a CPU, where no kernel times the work: what the ops were given (a GPU's work is its kernels' time)
    elements = input_elements_per_step(trace) if kernel_ms is None else None
    compiled_ms = compiled_kernel_ms_per_step(trace.events) if kernel_ms is None else None
    return {"ops_per_step": ops_per_step(trace.events),
            "compiled_kernel_ms": None if compiled_ms is None else round(compiled_ms, 3),
            "matmul_mflops": None if mflops is None else round(mflops, 3),
            "compute_kernel_ms": None if kernel_ms is None else round(kernel_ms, 3),
            "unseen_host_ms": None if unseen_ms is None else round(unseen_ms, 3),
            "input_melements": None if elements is None else round(elements, 3)}


def extra_work(late: dict, waiting: dict, wait_ms: float, counted_only: bool = False) -> list[str]:
    """What the late rank did per step beyond the waiting rank, each beyond its margin (empty: nothing measurably
    more, so the wait is the late rank's host being slower, not work of its own). ``counted_only``: only what is
    counted, not timed (FLOPs, ops, input elements), which a busy machine cannot change: the comparison made between
    every two ranks whatever their waits."""
    found = []
    if late.get("matmul_mflops") is not None and waiting.get("matmul_mflops") is not None:
        extra_mflops = late["matmul_mflops"] - waiting["matmul_mflops"]
        if extra_mflops > FLOPS_MARGIN * waiting["matmul_mflops"]:
            share = f" ({extra_mflops / waiting['matmul_mflops']:+.0%})" if waiting["matmul_mflops"] else ""
            found.append(f"{extra_mflops:+.1f} MFLOP of matrix-multiply work per step{share}, measured from the shapes "
                         f"its trace recorded (margin {FLOPS_MARGIN:.0%})")
    extra_ops = late["ops_per_step"] - waiting["ops_per_step"]
    if extra_ops > OPS_MARGIN:
        found.append(f"{extra_ops:+g} recorded ops per step (margin {OPS_MARGIN})")
    if not counted_only and late["compute_kernel_ms"] is not None and waiting["compute_kernel_ms"] is not None:
        extra_ms = late["compute_kernel_ms"] - waiting["compute_kernel_ms"]
        if extra_ms > KERNEL_MARGIN * waiting["compute_kernel_ms"]:
            found.append(f"{extra_ms:+.2f} ms of compute kernels per step ({extra_ms / waiting['compute_kernel_ms']:+.0%}"
                         f", margin {KERNEL_MARGIN:.0%})")
    if not counted_only and late["unseen_host_ms"] is not None and waiting["unseen_host_ms"] is not None:
        extra_unseen = late["unseen_host_ms"] - waiting["unseen_host_ms"]
        if extra_unseen > UNSEEN_SHARE_OF_WAIT * wait_ms and late["unseen_host_ms"] > UNSEEN_RATIO * waiting["unseen_host_ms"]:
            found.append(f"{extra_unseen:+.2f} ms per step of host time in no recorded op ({late['unseen_host_ms']:.2f}"
                         f" against {waiting['unseen_host_ms']:.2f}): work out of the profiler's sight")
    late_compiled, waiting_compiled = late.get("compiled_kernel_ms"), waiting.get("compiled_kernel_ms")
    if not counted_only and late_compiled is not None and waiting_compiled is not None:
        extra_compiled = late_compiled - waiting_compiled
        if extra_compiled > UNSEEN_SHARE_OF_WAIT * wait_ms and late_compiled > UNSEEN_RATIO * waiting_compiled:
            found.append(f"{extra_compiled:+.2f} ms per step in compiled kernels ({late_compiled:.2f} against "
                         f"{waiting_compiled:.2f}): work inside compiled calls, which record one op each")
    if late.get("input_melements") is not None and waiting.get("input_melements") is not None:
        extra_elements = late["input_melements"] - waiting["input_melements"]
        if extra_elements > ELEMENTS_MARGIN * waiting["input_melements"]:
            share = f", {extra_elements / waiting['input_melements']:+.0%}" if waiting["input_melements"] else ""
            found.append(f"{extra_elements:+.2f} M input elements of its recorded ops per step ({late['input_melements']:.2f}"
                         f" against {waiting['input_melements']:.2f}{share}, margin {ELEMENTS_MARGIN:.0%})")
    return found


def ops_per_step(events: pd.DataFrame) -> float:
    """The median count of recorded CPU ops per step, collectives aside: the work a rank asked for, counted, which
    a busy machine's scheduling cannot change (a CPU's timings can be)."""
    ops = events[events["step"].notna() & (events["kind"] == "cpu_op") & ~events["name"].str.contains(COLLECTIVE_CALL)]
    counts = ops.groupby("step").size()
    return float(counts.median()) if len(counts) else 0.0


# --- the work each rank's steps did, measured from its trace (record_shapes: each matrix multiply's shapes) ---

BACKWARD_ANY = re.compile(r"^autograd::engine::evaluate_function: ")
_MATMUL = re.compile(r"^aten::(?:addmm|mm|bmm)$")


def _inside(times: np.ndarray, tids: np.ndarray, spans: pd.DataFrame) -> np.ndarray:
    """Whether each (time, thread) lies inside one of ``spans`` (start_ns, end_ns, tid) of the same thread."""
    inside = np.zeros(len(times), dtype=bool)
    for tid, mine in spans.groupby("tid"):
        starts = mine["start_ns"].to_numpy(np.int64)
        order = np.argsort(starts)
        starts, ends = starts[order], np.maximum.accumulate(mine["end_ns"].to_numpy(np.int64)[order])
        here = tids == tid
        j = np.searchsorted(starts, times[here], side="right") - 1
        inside[here] = (j >= 0) & (ends[np.clip(j, 0, None)] >= times[here])
    return inside


def _recorded_matmuls(found: dict) -> tuple[np.ndarray, ...]:
    """The products of a trace's ``meta["matmuls"]``: starts, ends, threads, recorded FLOPs, and whether each is
    inside another (aten::mv runs aten::addmv_, aten::ger runs aten::outer: that one's work, counted once)."""
    starts = np.asarray(found["start_ns"], dtype=np.int64)
    tids = np.asarray(found["tid"], dtype=np.int64)
    ends = starts + np.asarray(found.get("dur_ns") or np.zeros(len(starts)), dtype=np.int64)
    flops = np.asarray(found["flops"], dtype=np.float64)
    return starts, ends, tids, flops, _inside_other(starts, ends, tids)


def matmul_work(trace, rate_cap: float | None = None) -> pd.DataFrame:
    """Per traced step: the FLOPs of the matrix multiplies the rank ran, all of them and those of backward passes
    (inside an autograd node), from the shapes the trace recorded (``meta["matmuls"]``: the profiler's
    record_shapes), and ``products``: each product's recorded FLOPs, sorted (what sizes of products the step ran).
    Empty where the trace recorded no shapes.

    A recorded shape is a claim, not the work: a product on the meta device (or under a fake-tensor mode) is
    recorded with its shapes and computes nothing. So each product is credited only with work it could have done
    (``credited_flops``): on a trace with GPU rows, a product that launched no GPU work counts nothing; on a CPU
    trace, given ``rate_cap`` (FLOPs per ns), a product counts at most its own duration at that rate."""
    found = (getattr(trace, "meta", None) or {}).get("matmuls") or {}
    steps = trace.get_steps()
    columns = ["step", "matmul_flops", "backward_flops"]
    if not found.get("start_ns") or steps.empty:
        return pd.DataFrame(columns=columns + ["products"])
    starts, ends, tids, recorded, nested = _recorded_matmuls(found)
    flops = credited_flops(trace.events, starts, ends, tids, recorded, rate_cap)
    starts, tids, flops = starts[~nested], tids[~nested], flops[~nested]
    recorded = recorded[~nested]
    events = trace.events
    nodes = events[(events["kind"] == "cpu_op") & events["name"].str.contains(BACKWARD_ANY)]
    backward = _inside(starts, tids, nodes[["start_ns", "end_ns", "tid"]])
    rows = []
    for row in steps.itertuples():
        here = (starts >= row.start_ns) & (starts < row.end_ns)
        rows.append((int(row.step), float(flops[here].sum()), float(flops[here & backward].sum()),
                     tuple(sorted(int(f) for f in recorded[here]))))
    return pd.DataFrame(rows, columns=columns + ["products"])


def has_kernels(events: pd.DataFrame) -> bool:
    """Whether a trace recorded GPU kernels: its products are then credited by their launches, not their time."""
    return bool(((events["kind"] == "kernel") & events["device"].notna()).any())


def credited_flops(events: pd.DataFrame, starts: np.ndarray, ends: np.ndarray, tids: np.ndarray, flops: np.ndarray,
                   rate_cap: float | None = None) -> np.ndarray:
    """Each recorded product's FLOPs as far as it can have computed them. On a trace with GPU rows: its FLOPs where
    a CUDA call on its thread, inside it, launched GPU work (a kernel with that call's correlation id), else 0 (a
    product nested in a launching one is dropped as nested anyway). On a CPU trace with ``rate_cap``: at most its
    duration times the cap. Otherwise its FLOPs as recorded."""
    if has_kernels(events):
        kernels = events[(events["kind"] == "kernel") & events["correlation"].notna()]
        api = events[(events["kind"] == "cuda_api") & events["correlation"].notna()]
        launches = api[pd.MultiIndex.from_frame(api[["pid", "correlation"]]).isin(
            pd.MultiIndex.from_frame(kernels[["pid", "correlation"]]))]
        did = points_within(starts, ends, tids, launches["start_ns"].to_numpy(np.int64),
                            launches["tid"].to_numpy(np.int64)) > 0
        return np.where(did, flops, 0.0)
    if rate_cap is not None and rate_cap > 0:
        # a duration under the trace's resolution is not measured: such a product is credited as lasting that long
        credited = np.minimum(flops, np.maximum(ends - starts, RESOLUTION_NS).astype(np.float64) * rate_cap)
        # and a product whose span holds Python on its own thread is credited nothing: its time is not its arithmetic.
        # A kernel runs no Python; a product on the meta device made to last with Python inside it does (autograd's
        # anomaly mode formats a traceback inside every op: red team 60's nodepad_00; a dispatch mode's Python runs
        # inside the op too)
        python = events[events["kind"] == "python"]
        if len(python):
            held = points_within(starts, ends, tids, python["start_ns"].to_numpy(np.int64),
                                 python["tid"].to_numpy(np.int64)) > 0
            credited = np.where(held, 0.0, credited)
        return credited
    return flops


# The shortest duration a CPU trace measures (best_matmul_rate's min_dur_ns): a tiny product recorded shorter, its
# start and end a clock tick apart, was once credited next to nothing (an honest step of 0.1 MFLOP counted 33% short)
RESOLUTION_NS = 1000
# On a CPU trace a product is credited at most its own duration at this many times the best rate the slow script's
# products reached on the same machine in the same check (their 99th percentile): a product on the meta device is
# recorded with its shapes and takes about the same short time whatever its size, so a large one runs thousands of
# times above that rate; an honest product of the same shapes runs at the slow script's rate, both runs traced alike,
# give or take what load does to either on a shared machine
RATE_HEADROOM = 10.0
# ... and never less than the machine's peak: no honest product computes faster than every core at once. A relative
# cap alone failed honest steps: a process's first trace runs its small products ten times slower than a later one
# (0.3 GFLOP/s against 6 in tests/test_chapter_00.py's recordings), a busy machine slows every product of the slow
# script (red team 35's note: the cap once at 0.3 GFLOP/s), and a floor of 20 GFLOP/s still met honest products at 22
# (evidence/history/2026-12-05-cpu-session69-credit-cap-00.txt). Per core: 4 GHz x two 512-bit FMA units x 16 fp32
# lanes x 2 FLOPs = 256 FLOPs per ns. A product on the meta device of chapter 00's CPU sizes claims about 7,900 FLOPs
# per ns or more, over the peak of a 2-core machine (512) and of 16 cores (4,096)
PEAK_PER_CORE = 256.0


# ... counted over at most this many of the cores the grader may use: a meta product of chapter 00's short size claims
# about 7,900 FLOPs per ns (session 69's review), which 32 cores' peak would credit in full; 16 credit half of it
PEAK_CORES = 16


def peak_rate() -> float:
    """The most FLOPs per ns the cores this process may run on compute together (PEAK_PER_CORE each, PEAK_CORES at
    most)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return PEAK_PER_CORE * max(1, min(cores, PEAK_CORES))


def rate_cap(slow_traces) -> float | None:
    """The most FLOPs per ns a product of a CPU trace may be credited with: RATE_HEADROOM times the best rate of the
    slow script's products (``best_matmul_rate``, the fastest of its traces), and at least the machine's peak. None on
    GPU traces, where a product is credited by the kernels it launched, or where the slow script's traces recorded no
    timed product."""
    rates = []
    for trace in slow_traces:
        if has_kernels(trace.events):
            return None
        best = best_matmul_rate(trace)
        if best is not None:
            rates.append(best)
    return max(RATE_HEADROOM * max(rates), peak_rate()) if rates else None


def best_matmul_rate(trace, min_dur_ns: int = RESOLUTION_NS) -> float | None:
    """The rate (FLOPs per ns) a trace's matrix products reached on its machine: the 99th percentile over the
    products that lasted at least ``min_dur_ns`` (a shorter one's rate is its clock's rounding). None where the
    trace recorded no shapes or none lasted that long."""
    found = (getattr(trace, "meta", None) or {}).get("matmuls") or {}
    if not found.get("flops"):
        return None
    flops = np.asarray(found["flops"], dtype=np.float64)
    durations = np.asarray(found.get("dur_ns") or np.zeros(len(flops)), dtype=np.float64)
    timed = durations >= min_dur_ns
    if not timed.any():
        return None
    return float(np.percentile(flops[timed] / durations[timed], 99))


def _inside_other(starts: np.ndarray, ends: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """Which of these intervals lie inside an earlier-starting (or equal-starting, longer) one of the same thread."""
    inside = np.zeros(len(starts), dtype=bool)
    for tid in np.unique(tids):
        index = np.flatnonzero(tids == tid)
        order = index[np.lexsort((-ends[index], starts[index]))]  # by start, the longest first
        reach = np.maximum.accumulate(ends[order])
        # an interval is nested when an interval before it in this order reaches at least to its end
        before = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
        inside[order] = before >= ends[order]
    return inside


def forward_flops_per_sample(in_features: int, width: int, layers: int, classes: int) -> float:
    """The forward pass's matrix-multiply FLOPs per sample of chapter 09's MLP: every layer's 2 * in * out."""
    dims = [(in_features, width)] + [(width, width)] * (layers - 1) + [(width, classes)]
    return float(sum(2 * i * o for i, o in dims))


def backward_flops_per_sample(in_features: int, width: int, layers: int, classes: int) -> float:
    """The backward pass's matrix-multiply FLOPs per sample of chapter 09's MLP (``layers`` linear layers of
    ``width``, then a head): every layer's weight gradient, and the input gradient of every layer but the first
    (the samples need none)."""
    dims = [(in_features, width)] + [(width, width)] * (layers - 1) + [(width, classes)]
    weight = sum(2 * i * o for i, o in dims)
    inputs = sum(2 * i * o for i, o in dims[1:])
    return float(weight + inputs)


def backward_passes(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """A step's backward passes, told apart by the trace alone (no range a script chooses): runs of autograd nodes
    with no forward matrix multiply (one outside any autograd node) between them. Returns the nodes' starts,
    sorted, and each one's pass number."""
    ops = events[events["kind"] == "cpu_op"]
    nodes = ops[ops["name"].str.contains(BACKWARD_ANY)]
    node_starts = np.sort(nodes["start_ns"].to_numpy(np.int64))
    if not len(node_starts):
        return node_starts, np.zeros(0, np.int64)
    mm = ops[ops["name"].str.contains(_MATMUL)]
    mm_starts = mm["start_ns"].to_numpy(np.int64)
    forward = ~_inside(mm_starts, mm["tid"].to_numpy(np.int64), nodes[["start_ns", "end_ns", "tid"]])
    forward_starts = np.sort(mm_starts[forward])
    # a node starts a new pass when a forward matmul came after the node before it
    before = np.searchsorted(forward_starts, node_starts, side="left")  # forward matmuls started before each node
    new_pass = np.concatenate([[True], before[1:] > before[:-1]])
    return node_starts, np.cumsum(new_pass) - 1


def micro_batches(trace, accum: int) -> dict[int, int]:
    """Per traced step: how many of its backward passes (``backward_passes``) carry a micro-batch's work, at least
    half an even share (1/``accum``) of the step's backward matrix-product FLOPs, from the shapes the trace recorded.
    A forward pass is no micro-batch by itself: one of zero rows, or under no_grad, trains nothing (red team 71's
    noaccum_09 ran its share in one pass beside such a forward); a backward pass of a few rows is a decoy too. Steps
    whose backward products record no FLOPs (a trace without shapes, nsys) are left out: empty where none has them."""
    found = (getattr(trace, "meta", None) or {}).get("matmuls") or {}
    if not found.get("start_ns"):
        return {}
    steps = trace.get_steps()
    starts, _ends, tids, flops, nested = _recorded_matmuls(found)
    starts, tids, flops = starts[~nested], tids[~nested], flops[~nested]
    events = trace.events
    counts = {}
    for row in steps.itertuples():
        mine = events[(events["step"] == row.step)]
        node_starts, passes = backward_passes(mine)
        nodes = mine[(mine["kind"] == "cpu_op") & mine["name"].str.contains(BACKWARD_ANY)]
        here = (starts >= row.start_ns) & (starts < row.end_ns)
        here &= _inside(starts, tids, nodes[["start_ns", "end_ns", "tid"]]) if len(nodes) else False
        total = float(flops[here].sum())
        if not len(node_starts) or total <= 0:
            continue
        which = passes[np.clip(np.searchsorted(node_starts, starts[here], side="right") - 1, 0, None)]
        per_pass = np.bincount(which, weights=flops[here], minlength=int(passes.max()) + 1)
        counts[int(row.step)] = int((per_pass >= 0.5 * total / max(accum, 1)).sum())
    return counts


def allreduce_bursts(events: pd.DataFrame) -> int:
    """How many backward passes of a step all-reduce: each all-reduce call belongs to the backward pass it is
    made in or last after (calls before any backward pass form one more burst). Read from the collectives and the
    autograd nodes, with or without DDP's forward ranges."""
    calls = events[(events["kind"] == "cpu_op") & events["name"].str.contains(COLLECTIVE_CALL)]["start_ns"]
    calls = calls.to_numpy(np.int64)
    if not len(calls):
        return 0
    node_starts, passes = backward_passes(events)
    if not len(node_starts):
        return 1
    j = np.searchsorted(node_starts, calls, side="right") - 1
    owner = np.where(j >= 0, passes[np.clip(j, 0, None)], -1)
    return len(np.unique(owner))
