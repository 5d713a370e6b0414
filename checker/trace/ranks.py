"""Several ranks' traces of one data-parallel job, side by side (`workbook report RANK0 --ranks RANK1 ...`).

Per rank: the step time, the time in all-reduces, the part of it spent waiting for another rank (the
all-reduce's duration beyond the same all-reduce's shortest on any rank), the rest of the step (compute and the
host's own work), and, on GPU traces, the share of the all-reduce kernels' time hidden under compute kernels. The
straggler is named: the rank the others wait for.
"""

from __future__ import annotations

from checker.trace.analyses.collectives import allreduce_rounds, overlap_share, rank_waits, straggler_summary


def ranks_summary(traces: list, exclude_steps=()) -> dict:
    """What the ranks' traces show together; ``traces`` rank 0 first."""
    waits = rank_waits(traces, exclude_steps)
    summary = straggler_summary(waits)
    rows = []
    for rank, trace in enumerate(traces):
        mine = waits[waits["rank"] == rank]
        overlap = overlap_share(trace.events).dropna()
        rounds = allreduce_rounds(trace.events)
        step_ms = float(mine["step_ns"].median()) / 1e6 if len(mine) else None
        comm_ms = float(mine["collective_ns"].median()) / 1e6 if len(mine) else None
        wait_ms = float(mine["wait_ns"].median()) / 1e6 if len(mine) else None
        rows.append({
            "rank": rank, "steps": int(mine["step"].nunique()), "step_ms": _r(step_ms), "allreduce_ms": _r(comm_ms),
            "wait_ms": _r(wait_ms), "other_ms": _r(step_ms - comm_ms) if step_ms is not None else None,
            "wait_share": _r(float(mine["wait_share"].median()) if len(mine) else None),
            "allreduce_rounds": float(rounds["rounds"].median()) if len(rounds) else None,
            "hidden_share": _r(float(overlap["hidden_share"].median()) if len(overlap) else None),
        })
    return {"ranks": rows, "straggler": summary["straggler"], "waiting_rank": summary["waiting_rank"],
            "worst_wait_share": summary["worst_share"]}


def _r(value):
    return None if value is None else round(value, 3)


def render_ranks(summary: dict) -> str:
    lines = ["Ranks (medians over the steps every rank traced):",
             "  rank  step ms  all-reduce ms  waiting ms  wait share  other ms  rounds/step  hidden under compute"]
    for row in summary["ranks"]:
        def cell(key, fmt):
            value = row[key]
            return "-" if value is None else fmt.format(value)
        lines.append(f"  {row['rank']:>4}  {cell('step_ms', '{:7.2f}')}  {cell('allreduce_ms', '{:13.2f}')}  "
                     f"{cell('wait_ms', '{:10.2f}')}  {cell('wait_share', '{:10.0%}')}  {cell('other_ms', '{:8.2f}')}  "
                     f"{cell('allreduce_rounds', '{:11g}')}  {cell('hidden_share', '{:.0%}')}")
    if summary["worst_wait_share"] is None:
        lines.append("No all-reduce inside a step in these traces: no straggler to name.")
    else:
        lines.append(f"Straggler: rank {summary['straggler']}. Rank {summary['waiting_rank']} waits for it "
                     f"{summary['worst_wait_share']:.0%} of its step in all-reduces.")
    return "\n".join(lines)
