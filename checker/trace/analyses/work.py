"""Work per step: how much each traced step did, to judge every step rather than their median.

On a trace with GPU rows, a step's work is the GPU time of the kernels it launched (the union of their intervals:
CUDA graphs' kernels take the step of the graph's launch): a GPU is not shared with other processes mid-kernel. On
a CPU-only trace, time is not a measure: on a loaded machine an op's time includes the moments the process was
descheduled (two honest steps of chapter 01 differed 300-fold). There the work is a count: the backward pass's node
evaluations (``autograd::engine::evaluate_function: ...``) in the step, on any thread. A step that trains runs the
same backward as the next; a step that skipped its training, or ran its forward alone, runs none.

Training work per step (``training_work``) is a count too, on either kind of trace: the FLOPs of the matrix products
whose recorded shapes (the profiler's record_shapes) start inside the step's range, on any thread, forward and
backward apart, and the optimizer steps torch.optim ran there. ``work_by_step`` holds two runs' counts against each
other step by step: two runs of the same training on the same batches count the same in every step, so a step
that differs did other work than its own batch's, whatever its time.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd

from checker.trace.analyses.collectives import input_elements_by_step, matmul_work
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


# torch.optim's own range around every Optimizer.step() call ("Optimizer.step#SGD.step"), on the host
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
TRAINING_COLUMNS = {"step": "int64", "forward_flops": "float64", "backward_flops": "float64", "optimizer_steps": "int64",
                    "products": object}
MEASURES = ("forward_flops", "backward_flops")


def training_work(trace, rate_cap: float | None = None) -> pd.DataFrame:
    """One row per traced step: step, forward_flops (the matrix products outside any autograd node: the forward
    pass, and any other product the step ran), backward_flops (those inside one), optimizer_steps (torch.optim's
    ``Optimizer.step#...`` ranges that start in the step). The FLOPs are
    checker.trace.analyses.collectives.matmul_work's, from the shapes the profiler recorded, each product credited
    only with what it can have computed (on a GPU trace, a product that launched no kernel counts nothing; on a CPU
    trace, at most its duration at ``rate_cap`` FLOPs per ns). Empty where the trace recorded no shapes (a trace
    without record_shapes, or nsys)."""
    work = matmul_work(trace, rate_cap)
    if work.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in TRAINING_COLUMNS.items()})
    events = trace.events
    ranges = events[(events["kind"] == "range") & events["device"].isna() & events["step"].notna()]
    optimizer = ranges[ranges["name"].astype(str).str.contains(OPTIMIZER_STEP)].groupby("step").size()
    frame = pd.DataFrame({
        "step": work["step"].to_numpy(np.int64),
        "forward_flops": (work["matmul_flops"] - work["backward_flops"]).to_numpy(np.float64),
        "backward_flops": work["backward_flops"].to_numpy(np.float64),
        "optimizer_steps": [int(optimizer.get(s, 0)) for s in work["step"]],
        "products": list(work["products"]),
    })
    return frame.astype(TRAINING_COLUMNS)


def relative_difference(mine: float, theirs: float) -> float:
    """(mine - theirs) / theirs: 0 where both are 0, infinite where only theirs is."""
    if theirs:
        return (mine - theirs) / theirs
    return 0.0 if not mine else float("inf")


def work_by_step(candidate: pd.DataFrame, baseline: pd.DataFrame, tolerance: float,
                 same_products: bool = False) -> pd.DataFrame:
    """Two runs' training work (``training_work``) side by side, one row per step either traced: each measure of
    both (``forward_flops`` and ``baseline_forward_flops``, ...), each FLOPs measure's relative difference
    (``forward_off``: (candidate - baseline) / baseline), ``off``: the larger of the two in size, and ``differs``:
    a FLOPs measure off by more than ``tolerance``, another count of optimizer steps, or a step only one run traced
    (``traced``: "both", "candidate" or "baseline"). With ``same_products``, a step also differs where its products'
    sizes do (``products_differ``: the multiset of each product's recorded FLOPs, where a chapter's fix leaves the
    training as the slow script runs it: the same FLOPs made of other products are other work). Every step is
    judged: no median."""
    candidate, baseline = (frame if "products" in frame else frame.assign(products=[()] * len(frame))
                           for frame in (candidate, baseline))
    theirs = baseline.rename(columns={c: f"baseline_{c}" for c in TRAINING_COLUMNS if c != "step"})
    both = candidate.merge(theirs, on="step", how="outer", indicator=True).sort_values("step").reset_index(drop=True)
    both["traced"] = both.pop("_merge").map({"both": "both", "left_only": "candidate",
                                              "right_only": "baseline"}).astype(str)
    for measure in MEASURES:
        both[measure.replace("_flops", "_off")] = [
            relative_difference(mine, theirs) if traced == "both" else float("nan")
            for mine, theirs, traced in zip(both[measure], both[f"baseline_{measure}"], both["traced"])]
    both["off"] = both[["forward_off", "backward_off"]].abs().max(axis=1)
    optimizer = both["optimizer_steps"] != both["baseline_optimizer_steps"]
    both["products_differ"] = [bool(same_products) and traced == "both" and tuple(mine) != tuple(theirs)
                               for mine, theirs, traced in zip(both["products"], both["baseline_products"],
                                                               both["traced"])]
    both["differs"] = (both["traced"] != "both") | (both["off"] > tolerance) | optimizer | both["products_differ"]
    return both


# ops a benchmark may add to a step without changing the step: a value read for its log, a view of a tensor
BOOKKEEPING_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::detach", "aten::alias", "aten::view",
                             "aten::lift_fresh"})
OPS_COLUMNS = {"step": "int64", "extra_ops": object, "elements": "float64", "baseline_elements": "float64"}


def extra_ops_by_step(candidate, baseline) -> pd.DataFrame:
    """Where a chapter's fix leaves the training as the slow script runs it (chapter 00), what each step both traces
    hold ran beyond the slow script's same step: one row per such step, with ``extra_ops`` (a Counter of top-level
    aten ops by name, beyond the slow step's, bookkeeping aside) and both steps' input elements of every recorded op
    (in millions; NaN without recorded shapes). Two runs of the same training on the same batches record the same ops
    with the same shapes; work added to a step to make it last a chosen time (red team 38's opbeat_00 padded each
    step to a beat with elementwise ops) is ops or elements the slow step has not."""
    from checker.trace.analyses.counts import top_level_aten_ops

    def by_step(trace) -> dict[int, Counter]:
        ops = top_level_aten_ops(trace.events)
        # and every op of another namespace than aten's, at any depth: an operator the script defines for itself
        # (torch.library's Library("ns", "DEF") with a kernel of its own) records as "ns::name", not as an aten op,
        # and a sleep in its kernel is op time (red team 53's libdef00); torch's own (autograd::, torch::) are the
        # slow script's too
        events = trace.events
        named = events[(events["kind"] == "cpu_op") & events["step"].notna()]
        foreign = named[named["name"].astype(str).str.match(r"(?!aten::)\w+::")]
        ops = pd.concat([ops, foreign]) if len(foreign) else ops
        ops = ops[ops["step"].notna()]
        return {int(step): Counter(group["name"].astype(str)) for step, group in ops.groupby("step")}

    mine, theirs = by_step(candidate), by_step(baseline)
    elements = input_elements_by_step(candidate)
    baseline_elements = input_elements_by_step(baseline)
    rows = []
    for step in sorted(set(mine) & set(theirs)):
        extra = Counter({name: n for name, n in (mine[step] - theirs[step]).items() if name not in BOOKKEEPING_OPS})
        rows.append((step, extra,
                     float(elements.get(step, np.nan)) if elements is not None else np.nan,
                     float(baseline_elements.get(step, np.nan)) if baseline_elements is not None else np.nan))
    return pd.DataFrame(rows, columns=list(OPS_COLUMNS)).astype(OPS_COLUMNS)


def describe_step(row) -> str:
    """One step of ``work_by_step`` as a person reads it: what differs, and by how much."""
    if row.traced != "both":
        return f"step {int(row.step)}: traced in the {row.traced}'s run only"
    parts = []
    for measure in ("forward", "backward"):
        mine, theirs = getattr(row, f"{measure}_flops"), getattr(row, f"baseline_{measure}_flops")
        off = getattr(row, f"{measure}_off")
        parts.append(f"{measure} {mine / 1e6:.1f} vs {theirs / 1e6:.1f} MFLOP" + (f" ({off:+.0%})" if np.isfinite(off) else ""))
    parts.append(f"{int(row.optimizer_steps)} optimizer step(s) vs {int(row.baseline_optimizer_steps)}")
    if getattr(row, "products_differ", False):
        mine, theirs = Counter(row.products), Counter(row.baseline_products)
        parts.append(f"{sum((mine - theirs).values())} product(s) of sizes the slow script's step does not run, "
                     f"{sum((theirs - mine).values())} of its not run")
    return f"step {int(row.step)}: " + ", ".join(parts)
