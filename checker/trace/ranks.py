"""Several ranks' traces of one data-parallel job, side by side (`workbook report RANK0 --ranks RANK1 ...`).

Per rank: the step time, the time in all-reduces, the part of it spent waiting for another rank (the
all-reduce's duration beyond the same all-reduce's shortest on any rank), the rest of the step (compute and the
host's own work), the all-reduce rounds per step (the larger of the calls grouped by backward pass and the whole
gradients the step's collectives carried, by the sizes the trace recorded), the share of gradient buckets sent
while backward still computed, the work the rank did per step (recorded ops, compute-kernel time on a GPU, host
time no recorded op covers) and, on GPU traces, the share of the all-reduce kernels' time hidden under compute
kernels.

The rank the others wait for is the late rank. It is named the straggler only when it did measurably more per step
than the rank that waited (checker.trace.analyses.collectives.extra_work): two ranks running the same code are
late by turns, whichever host the profiler slowed more; that wait is no work of the late rank's to remove.
"""

from __future__ import annotations

from checker.trace.analyses.collectives import (allreduce_rounds, bucket_launches, collective_volume, extra_work,
                                                overlap_share, rank_waits, straggler_summary, work_per_step)


def ranks_summary(traces: list, exclude_steps=()) -> dict:
    """What the ranks' traces show together; ``traces`` rank 0 first."""
    waits = rank_waits(traces, exclude_steps)
    summary = straggler_summary(waits)
    rows = []
    for rank, trace in enumerate(traces):
        mine = waits[waits["rank"] == rank]
        overlap = overlap_share(trace.events).dropna()
        rounds = allreduce_rounds(trace.events)
        grouping = float(rounds["rounds"].median()) if len(rounds) else None
        volume = volume_rounds(trace)
        buckets = bucket_launches(trace.events).dropna()
        step_ms = float(mine["step_ns"].median()) / 1e6 if len(mine) else None
        comm_ms = float(mine["collective_ns"].median()) / 1e6 if len(mine) else None
        wait_ms = float(mine["wait_ns"].median()) / 1e6 if len(mine) else None
        rows.append({
            "rank": rank, "steps": int(mine["step"].nunique()), "step_ms": _r(step_ms), "allreduce_ms": _r(comm_ms),
            "wait_ms": _r(wait_ms), "other_ms": _r(step_ms - comm_ms) if step_ms is not None else None,
            "wait_share": _r(float(mine["wait_share"].median()) if len(mine) else None),
            "allreduce_rounds": _most(grouping, volume["rounds_by_volume"]),
            "rounds_by_grouping": grouping, **volume,
            "early_bucket_share": _r(float(buckets["early_share"].median()) if len(buckets) else None),
            "hidden_share": _r(float(overlap["hidden_share"].median()) if len(overlap) else None),
            "work": work_per_step(trace),
        })
    late, waiting = summary["late_rank"], summary["waiting_rank"]
    more = []
    if late is not None and late != waiting:
        more = extra_work(rows[late]["work"], rows[waiting]["work"], summary["ranks"][waiting]["wait_ms"])
    return {"ranks": rows, "late_rank": late, "waiting_rank": waiting, "worst_wait_share": summary["worst_share"],
            "straggler": late if more else None, "late_rank_did_more": more}


def volume_rounds(trace) -> dict:
    """How many whole gradients a rank's busiest step communicated: its collectives' elements (the sizes its trace
    recorded) over the gradient elements one backward pass stored (AccumulateGrad's sizes, the median step). None
    where the trace recorded no sizes."""
    volume = collective_volume(trace)
    gradient = volume["gradient_elements"].median() if len(volume) else float("nan")
    known = len(volume) and not volume["unsized_calls"].sum() and gradient == gradient and gradient > 0
    return {"elements_per_step": int(volume["elements"].max()) if known else None,
            "gradient_elements": int(gradient) if known else None,
            "rounds_by_volume": round(float(volume["elements"].max()) / gradient, 2) if known else None}


def _most(*values):
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _r(value):
    return None if value is None else round(value, 3)


def render_ranks(summary: dict) -> str:
    lines = ["Ranks (medians over the steps every rank traced):",
             "  rank  step ms  all-reduce ms  waiting ms  wait share  other ms  rounds/step  early buckets  "
             "ops/step  kernel ms  unseen host ms  hidden under compute"]
    for row in summary["ranks"]:
        def cell(key, fmt, source=row):
            value = source[key]
            return "-" if value is None else fmt.format(value)
        work = row["work"]
        lines.append(f"  {row['rank']:>4}  {cell('step_ms', '{:7.2f}')}  {cell('allreduce_ms', '{:13.2f}')}  "
                     f"{cell('wait_ms', '{:10.2f}')}  {cell('wait_share', '{:10.0%}')}  {cell('other_ms', '{:8.2f}')}  "
                     f"{cell('allreduce_rounds', '{:11g}')}  {cell('early_bucket_share', '{:13.0%}')}  "
                     f"{cell('ops_per_step', '{:8g}', work)}  {cell('compute_kernel_ms', '{:9.2f}', work)}  "
                     f"{cell('unseen_host_ms', '{:14.2f}', work)}  {cell('hidden_share', '{:.0%}')}")
    for row in summary["ranks"]:
        if row["rounds_by_volume"] is not None and row["rounds_by_volume"] > (row["rounds_by_grouping"] or 0):
            lines.append(f"Rank {row['rank']}'s busiest step communicated {row['elements_per_step']:,} elements, "
                         f"{row['rounds_by_volume']:g}x the {row['gradient_elements']:,} gradient elements one backward "
                         f"pass stores, though its all-reduces come in {row['rounds_by_grouping']:g} round(s): the rounds "
                         "shown are the gradients it communicated.")
    if summary["worst_wait_share"] is None:
        lines.append("No all-reduce inside a step in these traces: no straggler to name.")
    elif summary["straggler"] is not None:
        lines.append(f"Straggler: rank {summary['straggler']}. Rank {summary['waiting_rank']} waits for it "
                     f"{summary['worst_wait_share']:.0%} of its step in all-reduces; rank {summary['straggler']} did "
                     f"more per step: {'; '.join(summary['late_rank_did_more'])}.")
    else:
        lines.append(f"No straggler: rank {summary['waiting_rank']} waits {summary['worst_wait_share']:.0%} of its step "
                     f"in all-reduces for rank {summary['late_rank']}, which did no more work per step (ops, kernel "
                     "time and unseen host time within their margins): a late host, not extra work.")
    return "\n".join(lines)
