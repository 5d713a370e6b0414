"""The checks of a data-parallel job (chapter 09), each on evidence the grader owns: every rank's run, and every
rank's trace (``candidate``, ``candidate.rank1``, ...).

* rank_work: each sample trained once across the ranks, the global batch per step, and both ranks ending with the
  same weights. What each rank read is its harness's record (checker.base.ranks.LoggedSamples); same_work's referee
  judges the weights against the slow script's, trained under the same secret, which is what the work rests on.
* straggler: the longest wait in collectives of any rank, as a share of its step (checker.trace.analyses.collectives:
  each all-reduce's duration beyond the same all-reduce's shortest on any rank), blamed on the late rank only when it
  did measurably more per step than the rank that waited: more recorded ops (counted), more compute-kernel time (GPU),
  or much more host time in no recorded op (work hidden from the profiler). A rank that is late with the same work
  is a slower host (the profiler's overhead lands unevenly), not a straggler.
* allreduce_rounds: the all-reduce rounds per optimizer step, the larger of two counts: how many micro-batches'
  backward passes all-reduce (the calls grouped by backward pass, median step), and how many whole gradients the
  step's collectives carried (their elements, from the sizes the trace recorded, over the model's gradient
  elements; the busiest step), so that gradients kept and all-reduced together after the last backward count.
* comm_overlap: the share of the gradient buckets whose all-reduce the host called while backward still had
  gradients to compute (each rank's order of events; the GPU's overlap of kernels is reported beside it).
"""

from __future__ import annotations

import statistics

import numpy as np

from checker.checks import BASELINE_TRACE_CPU, FAILED, PASSED, RUN, TRACE, check, result
from checker.checks.evidence import TraceMismatch, cpu_per_step, rank_traces
from checker.trace.analyses.collectives import allreduce_rounds as _rounds
from checker.trace.analyses.collectives import (backward_flops_per_sample, bucket_launches, collective_volume,
                                                extra_work, forward_flops_per_sample, matmul_work, micro_batches, rate_cap,
                                                model_gradient_elements, overlap_share, rank_waits, straggler_summary,
                                                input_elements_by_step, unseen_host_ms_per_step, work_per_step)

ROWS_TOLERANCE = 0.1  # measured training rows per step against global_batch / world_size: duplicated work is 2x
# a rank's matrix products in its busiest step but a logging step (forward and backward) against what training its share needs: an
# evaluation or a metric computed in every step, on every rank alike (so that no rank waits for another), is work
# beyond training that no straggler shows. The products are counted from their shapes, not timed: the solution's is
# exactly 1.0 (its evaluation is in logging steps only), so the allowance is room for nothing but rounding
EXTRA_WORK_TOLERANCE = 0.02
WEIGHT_GAP = 1e-6  # ranks that apply one all-reduced gradient end identical; this leaves room for nothing else
# On a CPU, where no speed is graded: the host time per step that no recorded op covers, on any rank, against the
# slow script's (its ranks traced in the same check): work done outside PyTorch (numpy, another library) in every
# step is out of the matrix-product count's sight, but not out of the step's time. docs/results/cpu-trace-coverage-09.md's
# runs: the slow script's ranks 1.4-3.2 ms, the solution's 1.2-1.4, the lab's 1.5-2.6; both ranks evaluating a quarter
# of the held-out set in numpy every step (numpy_eval_09), 8.2 and 9.0
UNSEEN_VS_SLOW = 2.0
UNSEEN_MARGIN_MS = 1.0
# On a CPU: the input elements each rank's recorded ops are given per step (their recorded shapes, whatever the ops
# are named), against the slow script's least busy rank, which trains the whole global batch: an evaluation every
# step on every rank alike, in ops no product list names (red team 28's torch.cdist on both ranks, red team 30's
# broadcast multiplies), adds elements no straggler or product count shows. Counted, not timed; the solution's ranks
# give their ops fewer elements than that rank, since they train half the rows.
ELEMENTS_VS_SLOW = 1.10
# On a CPU: each rank's CPU time per window step, as the grader reads it from the kernel's accounting of the rank's
# processes (checker.grader.sandbox.cpu_of_run), not from its trace: work on a thread the profiler does not follow (a
# comm hook's callback on gloo's thread: red team 62's hookeval_09) or in code no op records is CPU time all the same,
# and a rank blocked in an all-reduce spends none. The slow script's rank 0 evaluates every step, so its CPU beyond
# its rank 1's is an evaluation's cost per step; session 77's runs (evidence/history/2026-12-07-cpu-session77-rank-cpu-09.txt):
# the slow script's rank 0 47-66 ms beyond its rank 1, the solution's 3.5-11.9 ms (0.07-0.18 of it: its one logging step in the window).
# The same hidden work on every rank is not judged by it: an unwaited rank's CPU per step varied 9-15 ms from run to run
CPU_SPREAD_VS_SLOW = 0.3  # the busiest rank's CPU per step beyond the least busy's, as a share of the slow script's
CPU_SPREAD_FLOOR_MS = 2.0
# ...and every rank's CPU per step at most the slow script's least busy rank's (it trains the whole global batch,
# twice a rank's share) plus this share of the slow script's evaluation: the same hidden work on every rank (red team
# 63's compiled evaluation on both ranks, or split between them) raises every rank alike, which the spread cannot see.
# The solution's busiest rank: 16.4-26.8 ms against ceilings of 35-46 (session 77's runs)
CPU_CEILING_EVAL_SHARE = 0.5
# A class graded against the reference solution (its baseline, trained under the same secret, in place of the slow
# script): no rank spends more CPU per step than this many times the reference's busiest rank, which evaluates once in
# the window (an evaluation every step costs several times a solution's step: session 77's class test, 22.9 ms against
# the reference's 26.1)
CPU_VS_REFERENCE = 2.5
# A long wait is a late host's, not a straggler's, when the late rank did no more counted work; but counts can be
# matched by decoys (red team 64's decoy_sort_09: rank 0 sorts weights every step, rank 1 sorts zeros of the same shape,
# the same ops and elements at an eighth of the time). On a CPU the grader reads each rank's own CPU as each window step
# begins (checker.grader.runs, step_cpu_ns; the rank waits for the grader's answer, so the reading is the step's
# boundary): where a rank waits more than UNEVEN_WAIT_SHARE of its step (half the threshold: session 78 judged only
# waits over it, and decoy_sort_09 passed where rank 1 waited 34%) and the late rank's steps cost it more CPU than
# the waiting rank's by UNEVEN_CPU_FLOOR_MS, at their lower quartile (logging steps aside), the wait is the late rank's
# work. The lower quartile: a step's CPU has only extra costs (an allocator's, the profiler's buffers, a waiting rank's
# spin), so its quiet steps say what the step itself costs, and hidden work in every step raises them all. With the
# answers, the solution's ranks' lower quartiles differed by 0.07-2.56 ms in session 79's nine readings (either rank
# the busier; its waits were 4-12% in session 78's readings, 2026-12-07-cpu-session78-step-cpu-09.jsonl), decoy_sort_09's
# by 6.7-7.6 in six (evidence/history/2026-12-07-cpu-session79-step-cpu-acks-09.jsonl).
UNEVEN_WAIT_SHARE = 0.2
UNEVEN_CPU_FLOOR_MS = 4.0
# ...and every rank's median step (logging steps aside) at most this many times the slow script's least busy rank's,
# which trains the whole global batch (twice a rank's share) and evaluates nothing: an evaluation every step, whole or
# split between the ranks, costs every step, where the window's average (CPU_CEILING_EVAL_SHARE) counts the solution's
# logging-step evaluation too and left red team 63's compiled_spliteval_09 within a few ms of its ceiling (it passed
# once in three on an idle machine in session 78). Session 78's readings: the solution's ranks 3.1-7.1 ms,
# compiled_spliteval_09's 25-30 ms against the slow script's least busy rank's ~5 (the window's averages). Beside a
# reference solution: STEP_CPU_VS_REFERENCE times its busiest rank's median step.
STEP_CPU_VS_SLOW = 2.5
STEP_CPU_VS_REFERENCE = 2.5
STEP_CPU_FLOOR_MS = 5.0


def trained_rows(evidence) -> tuple[list, list]:
    """Each rank's training rows per step (median over its traced steps), measured from its trace: the FLOPs of
    the matrix products of its backward passes over the model's backward FLOPs per sample (the shapes the
    profiler recorded, chapter.toml's record_shapes); and the rows all its matrix products (forward, backward and
    any other) would train in its busiest step but a logging step, over forward and backward FLOPs per sample.
    None for a rank whose trace recorded no shapes."""
    cfg = evidence.cfg
    per_sample = backward_flops_per_sample(int(cfg["in_features"]), int(cfg["width"]), int(cfg["layers"]),
                                           int(cfg["classes"]))
    whole = per_sample + forward_flops_per_sample(int(cfg["in_features"]), int(cfg["width"]), int(cfg["layers"]),
                                                  int(cfg["classes"]))
    rows, totals = [], []
    cap = None  # on a CPU each product is credited at most its duration at a rate the slow script's ranks reached
    if evidence.device == "cpu" and "baseline" in (getattr(evidence, "traces", None) or {}):
        try:
            cap = rate_cap(rank_traces(evidence, "baseline"))
        except (TraceMismatch, KeyError):
            cap = None
    for trace in rank_traces(evidence):
        work = matmul_work(trace, cap)
        rows.append(round(float(work["backward_flops"].median()) / per_sample, 2) if len(work) else None)
        # every step but a logging step is judged (a count of products, not a time: no noise to take a median of),
        # so that work beyond training in a minority of the steps is seen too
        judged = work[~work["step"].map(evidence.is_log_step).astype(bool)] if len(work) else work
        totals.append(round(float(judged["matmul_flops"].max()) / whole, 2) if len(judged) else None)
    return rows, totals


def unseen_beyond_slow(evidence) -> tuple[dict, list[str]]:
    """On a CPU: each rank's host time per step no recorded op covers, against the slow script's ranks' (measured,
    and a line for each rank past UNSEEN_VS_SLOW times the slow script's most plus UNSEEN_MARGIN_MS)."""
    if evidence.device != "cpu" or "baseline" not in (getattr(evidence, "traces", None) or {}):
        return {}, []  # a GPU's throughput judges the time; evidence with no slow script's trace asked for none
    try:
        slow = [unseen_host_ms_per_step(trace) for trace in rank_traces(evidence, "baseline")]
        mine = [unseen_host_ms_per_step(trace) for trace in rank_traces(evidence)]
    except (TraceMismatch, KeyError):
        return {}, ["the slow script's ranks were not traced: the host time its steps spend outside recorded ops, "
                    "against which each rank's is judged, is unknown"]
    if any(ms is None for ms in slow + mine):
        return {}, []
    allowed = UNSEEN_VS_SLOW * max(slow) + UNSEEN_MARGIN_MS
    measured = {"unseen_host_ms_per_step": [round(ms, 2) for ms in mine],
                "slow_unseen_host_ms_per_step": [round(ms, 2) for ms in slow], "unseen_allowed_ms": round(allowed, 2)}
    over = [(rank, ms) for rank, ms in enumerate(mine) if ms > allowed]
    if not over:
        return measured, []
    said = ", ".join(f"rank {rank} {ms:.1f} ms" for rank, ms in over)
    return measured, [f"host time in no recorded op per step: {said}, against the slow script's {max(slow):.1f} ms at "
                      f"most (allowed {allowed:.1f} ms): work done outside PyTorch in every step (numpy, another "
                      "library) is work beyond training the trace cannot count; keep evaluations and metrics for "
                      "logging steps, in PyTorch"]


def elements_beyond_slow(evidence) -> tuple[dict, list[str]]:
    """On a CPU: each rank's recorded ops' input elements per step, against the slow script's least busy rank's
    (measured, and a line for each rank past ELEMENTS_VS_SLOW times it). Nothing where shapes were not recorded."""
    if evidence.device != "cpu" or "baseline" not in (getattr(evidence, "traces", None) or {}):
        return {}, []
    try:
        slow = [input_elements_by_step(trace) for trace in rank_traces(evidence, "baseline")]
        mine = [input_elements_by_step(trace) for trace in rank_traces(evidence)]
    except (TraceMismatch, KeyError):
        return {}, []  # unseen_beyond_slow says that the slow script's ranks were not traced
    if any(m is None for m in slow + mine):
        return {}, []
    # the slow script's ranks by their usual step; each of the candidate's by its busiest step but a logging step
    # (counted, not timed: work beyond training in a minority of the steps is seen too)
    slow = [float(m.median()) for m in slow]
    judged = [m[~np.array([evidence.is_log_step(int(step)) for step in m.index], dtype=bool)] for m in mine]
    mine = [float(j.max()) if len(j) else float(m.median()) for j, m in zip(judged, mine)]
    allowed = ELEMENTS_VS_SLOW * min(slow)
    measured = {"input_melements_per_step": [round(m, 2) for m in mine],
                "slow_input_melements_per_step": [round(m, 2) for m in slow], "input_melements_allowed": round(allowed, 2)}
    over = [(rank, m) for rank, m in enumerate(mine) if m > allowed]
    if not over:
        return measured, []
    said = ", ".join(f"rank {rank} {m:.1f} M" for rank, m in over)
    return measured, [f"input elements of the recorded ops per step: {said}, against {min(slow):.1f} M on the slow "
                      f"script's least busy rank, which trains the whole global batch (allowed {allowed:.1f} M): work "
                      "beyond training in every step, on a rank or on all of them alike, in ops no product list names; "
                      "keep evaluations and metrics for logging steps"]


@check("rank_work", needs=(RUN, TRACE, BASELINE_TRACE_CPU), after=("same_work",), key="duplicated_share",
       fmt="{:.0%}")
def rank_work(evidence, spec):
    """every rank trains its own share: each sample once per epoch, the global batch per step, the ranks' weights equal"""
    threshold = float(spec.threshold_for(evidence.device))
    global_batch = int(evidence.cfg["global_batch"])
    lines, shares, short_steps, gaps = [], [], [], []
    for _baseline, job in evidence.pairs:
        if len(job.ranks) < 2:
            lines.append("the job ran on one rank: the grader starts world_size ranks (chapter.toml)")
            continue
        per_rank = []
        for rank, run in enumerate(job.ranks):
            if run.sample_ids is None or not run.sample_counts:
                lines.append(f"rank {rank} read no sample through the workload's dataset in the window: read "
                             "session.dataset with a DataLoader whose num_workers is 0")
                per_rank = None
                break
            ids = np.frombuffer(run.sample_ids, dtype=np.int64)
            per_rank.append(np.split(ids, np.cumsum(run.sample_counts)[:-1]))
        if per_rank is None:
            continue
        steps = min(len(r) for r in per_rank)
        total = sum(int(sum(len(s) for s in r[:steps])) for r in per_rank)
        distinct_all = np.unique(np.concatenate([np.concatenate(r[:steps]) for r in per_rank]))
        shares.append(1 - len(distinct_all) / total if total else 0.0)
        distinct = [len(np.unique(np.concatenate([r[s] for r in per_rank]))) for s in range(steps)]
        short_steps.append(sum(d < global_batch for d in distinct))
        if job.rank_weight_gap is not None:
            gaps.append(job.rank_weight_gap)
    measured = {"jobs": len(evidence.pairs), "global_batch": global_batch}
    if shares:
        worst = max(shares)
        measured.update(duplicated_share=round(worst, 4), steps_short_of_global_batch=max(short_steps))
        if worst > threshold:
            copies = 1 / (1 - worst) if worst < 1 else float("inf")
            lines.append(f"each sample was read by {copies:.1f} ranks on average ({worst:.0%} of the reads repeat "
                         "another rank's): every rank reads every sample; give the DataLoader a DistributedSampler")
        if max(short_steps):
            lines.append(f"in {max(short_steps)} step(s) the ranks together read fewer than the global batch of "
                         f"{global_batch} distinct samples: some samples of the epoch were trained by no rank")
    if gaps:
        measured["rank_weight_gap"] = max(gaps)
        if max(gaps) > WEIGHT_GAP:
            lines.append(f"the ranks ended with different weights (up to {max(gaps):.2g} of a tensor's largest value "
                         "apart): every rank must apply the same all-reduced gradient")
    elif evidence.pairs:
        lines.append("the ranks' weights could not be compared: a rank sent none, or none that load")
    # the verdict on each rank's work is measured, not reported: the rows its backward passes' matrix products
    # processed per step (its trace, shapes recorded). The sample log is written in the rank's own process: it can
    # be made to look right, so it cannot pass a rank; a log that shows samples read twice or never fails one.
    rows, totals = trained_rows(evidence)
    share = global_batch / max(int(evidence.cfg.get("world_size") or len(rows)), 1)
    measured.update(trained_rows_per_step=rows, expected_rows_per_step=share, computed_rows_per_step=totals)
    beyond = [(rank, t) for rank, t in enumerate(totals) if t is not None and t > (1 + EXTRA_WORK_TOLERANCE) * share]
    if beyond:
        said = ", ".join(f"rank {rank} {t / share:.2f}x" for rank, t in beyond)
        lines.append(f"the ranks' matrix products in their busiest step (logging steps aside) were {said} what "
                     f"training their share of {share:g} rows needs (forward and backward, from their traces; allowed "
                     f"{1 + EXTRA_WORK_TOLERANCE:g}x): work beyond training in a step, an evaluation or a metric, "
                     "slows every rank; keep it for logging steps")
    unseen, unseen_lines = unseen_beyond_slow(evidence)
    measured.update(unseen)
    lines += unseen_lines
    elements, elements_lines = elements_beyond_slow(evidence)
    measured.update(elements)
    lines += elements_lines
    if any(r is None for r in rows):
        lines.append("a rank's trace recorded no matrix multiply with its shapes in its steps: its training work "
                     "could not be measured")
    else:
        off = [(rank, r) for rank, r in enumerate(rows) if abs(r - share) > ROWS_TOLERANCE * share]
        if off:
            said = ", ".join(f"rank {rank} {r:g}" for rank, r in off)
            lines.append(f"the ranks' backward passes trained {said} rows per step (their matrix multiplies' FLOPs, "
                         f"from their traces), not the {share:g} of global_batch / world_size each: a rank that "
                         "trains more than its share duplicates another's work, one that trains less leaves its "
                         "share to another")
    status = FAILED if lines else PASSED
    return result(spec, status, measured=measured, threshold=threshold,
                  evidence=lines or [f"each rank trained {share:g} rows per step (measured from its trace's matrix "
                                     f"products), no sample read twice in the ranks' sample logs, {global_batch} per "
                                     "step; the ranks' weights identical"])


@check("straggler", needs=(TRACE,), after=("same_work",), key="worst_wait_share", fmt="{:.0%}")
def straggler(evidence, spec):
    """no rank does more counted work per step than another, and none waits long for another that does more: a long wait is a straggler's only when the late rank did measurably more"""
    threshold = float(spec.threshold_for(evidence.device))
    traces = rank_traces(evidence)
    waits = rank_waits(traces)
    summary = straggler_summary(waits)
    if summary["worst_share"] is None:
        return result(spec, FAILED, threshold=threshold,
                      evidence=["the ranks' traces hold no all-reduce inside a step: the job did not all-reduce"])
    worst = summary["worst_share"]
    waiting, late = summary["waiting_rank"], summary["late_rank"]
    info = summary["ranks"][waiting]
    work = {rank: work_per_step(trace) for rank, trace in enumerate(traces)}
    more = extra_work(work[late], work[waiting], info["wait_ms"])
    measured = {"worst_wait_share": worst, "waiting_rank": waiting, "late_rank": late, "ranks": summary["ranks"],
                "work_per_step": work, "late_rank_did_more": more}
    line = (f"rank {waiting} waits {info['wait_ms']:.2f} ms of its {info['step_ms']:.2f} ms step ({worst:.0%}, the "
            f"median over {waits['step'].nunique()} traced steps) in all-reduces for rank {late}; threshold "
            f"{threshold:.0%}")
    # whatever the waits show: a wait can be hidden from them (red team 30's crossed_waits_09 made rank 1 wait in
    # an all-reduce of another group, which lined up with rank 0's own long one), the work cannot. Ranks running the
    # same code differ in no counted measure of it.
    unequal = [(a, b, found) for a in work for b in work if a != b
               and (found := extra_work(work[a], work[b], 0.0, counted_only=True))]
    if unequal:
        a, b, found = unequal[0]
        measured["straggler"] = a
        return result(spec, FAILED, measured=measured, threshold=threshold, evidence=[
            line, f"rank {a} did more per step than rank {b}, whatever the waits show: {'; '.join(found)}: it does "
                  "work the other ranks do not, inside the step"])
    if worst > threshold and more:
        measured["straggler"] = late
        line += f"; rank {late} did more per step: {'; '.join(more)}: it does work the other ranks do not, inside the step"
        return result(spec, FAILED, measured=measured, threshold=threshold, evidence=[line])
    # whatever the waits and the trace show: the CPU time each rank spent (a CPU run, beside the slow script's)
    steps_cpu, base_steps = step_cpu_ms(evidence), step_cpu_ms(evidence, which=0)
    if steps_cpu is not None:
        measured["step_cpu_ms"] = [round(ms, 3) for ms in steps_cpu]
    if base_steps is not None:
        measured["baseline_step_cpu_ms"] = [round(ms, 3) for ms in base_steps]
    busy = cpu_beyond_slow(evidence)
    if busy is not None:
        measured["rank_cpu_ms"], found = busy
        if found:
            mine = measured["rank_cpu_ms"]["candidate"]
            measured["straggler"] = mine.index(max(mine))
            return result(spec, FAILED, measured=measured, threshold=threshold, evidence=[line, found])
    if steps_cpu is not None and base_steps is not None and len(base_steps) == len(steps_cpu):
        found = busy_steps(evidence, base_steps, steps_cpu)
        if found:
            measured["straggler"] = steps_cpu.index(max(steps_cpu))
            return result(spec, FAILED, measured=measured, threshold=threshold, evidence=[line, found])
    quiet = step_cpu_ms(evidence, quartile=1)
    if quiet is not None:
        measured["step_cpu_ms_lower_quartile"] = [round(ms, 3) for ms in quiet]
        extra = quiet[late] - quiet[waiting]
        if worst > UNEVEN_WAIT_SHARE and extra > UNEVEN_CPU_FLOOR_MS:
            measured["straggler"] = late
            return result(spec, FAILED, measured=measured, threshold=threshold, evidence=[
                line, f"rank {late}'s steps cost its process {quiet[late]:.2f} ms of CPU, rank {waiting}'s "
                      f"{quiet[waiting]:.2f} ms (each rank's lower quartile over the window's steps, logging steps "
                      f"aside; the kernel's accounting, read as each step began): {extra:.2f} ms more, over "
                      f"{UNEVEN_CPU_FLOOR_MS:g} ms: the wait is rank {late}'s work, whatever its counts show, not a "
                      "late host"])
    if worst <= threshold:
        return result(spec, PASSED, measured=measured, threshold=threshold, evidence=[line])
    measured["straggler"] = None
    line += (f"; but rank {late} did no more work per step than rank {waiting} (ops "
             f"{work[late]['ops_per_step'] - work[waiting]['ops_per_step']:+g}{_kernels(work, late, waiting)}, "
             "host time unseen by the profiler within its margin): a late host, not a straggler")
    return result(spec, PASSED, measured=measured, threshold=threshold, evidence=[line])


def beside_slow(evidence) -> bool:
    """Whether the traced pair's baseline is the slow script (else the reference solution: a class's baseline)."""
    return getattr(evidence.traced[0], "script", None) == evidence.chapter.slow_script


def busy_steps(evidence, base: list[float], mine: list[float]) -> str:
    """Why the candidate's ranks' median steps cost too much CPU beside the baseline's ("" when they do not): any rank
    over STEP_CPU_VS_SLOW times the slow script's least busy rank's median step (which trains the whole global batch,
    twice a rank's share), or STEP_CPU_VS_REFERENCE times a reference solution's busiest rank's. Logging steps are
    left out of both medians, so an evaluation the solution makes there costs nothing here, and one made every step
    (whole, or split between the ranks) costs every step."""
    slow = beside_slow(evidence)
    scale, factor = (min(base), STEP_CPU_VS_SLOW) if slow else (max(base), STEP_CPU_VS_REFERENCE)
    ceiling = max(factor * scale, STEP_CPU_FLOOR_MS)
    if max(mine) <= ceiling:
        return ""
    busiest = mine.index(max(mine))
    which = ("the slow script's least busy rank (which trains the whole global batch)" if slow
             else "the reference solution's busiest rank")
    return (f"rank {busiest}'s median step (logging steps aside) cost its process {max(mine):.2f} ms of CPU, more than "
            f"{factor:g}x {which}'s {scale:.2f} ms (the kernel's accounting, read as each step began; ranks "
            f"{', '.join(f'{ms:.2f}' for ms in mine)} ms): every step does work beyond training its share, whether or "
            "not its trace records it")


def step_cpu_ms(evidence, which: int = 1, quartile: int = 2) -> list[float] | None:
    """On a CPU: each rank's median (``quartile`` 2; 1: lower quartile) CPU ms per window step of the traced pair's
    candidate run (``which`` 1) or baseline run (0) (its own process, read by the grader as each step began and as the
    window closed), logging steps aside; None where a rank has no readings."""
    traced = getattr(evidence, "traced", None)
    if evidence.device != "cpu" or traced is None or traced[which] is None:
        return None
    ranks = getattr(traced[which], "ranks", None) or []
    medians = []
    for rank in ranks:
        marks = getattr(rank, "step_cpu_ns", None) or []
        first = int(getattr(rank, "steps", 0)) - (len(marks) - 1)
        costs = [(b - a) / 1e6 for step, (a, b) in enumerate(zip(marks, marks[1:]), start=first)
                 if not evidence.is_log_step(step)]
        if not costs:
            return None
        medians.append(statistics.median(costs) if quartile == 2 or len(costs) < 2
                       else statistics.quantiles(costs, n=4, method="inclusive")[quartile - 1])
    return medians if len(medians) > 1 else None


def rank_cpu_ms(run) -> list[float] | None:
    """Each rank's CPU ms per window step (its own process and every one under it), as the grader read them; None
    where a rank has no reading (not a job, or not read)."""
    ranks = getattr(run, "ranks", None) or []
    if not ranks or any(getattr(rank, "window_cpu_ns", None) is None for rank in ranks):
        return None
    return [cpu_per_step([rank], which=None) / 1e6 for rank in ranks]


def cpu_beyond_slow(evidence) -> tuple[dict, str] | None:
    """On a CPU: the candidate's ranks' CPU per window step against the baseline's traced beside it, and why it is
    too much ("" when it is not). Beside the slow script: a rank busier than another by more than
    CPU_SPREAD_VS_SLOW of the slow script's rank 0's CPU beyond its rank 1's (an evaluation every step), or any rank
    busier than the slow script's least busy rank (which trains the whole global batch) by more than
    CPU_CEILING_EVAL_SHARE of that evaluation. Beside the reference solution (a class's baseline): any rank busier than
    CPU_VS_REFERENCE times its busiest. None where there is nothing to compare (a GPU, no baseline beside, a rank
    without the kernel's reading)."""
    traced = getattr(evidence, "traced", None)
    if evidence.device != "cpu" or traced is None or traced[0] is None:
        return None
    base, mine = rank_cpu_ms(traced[0]), rank_cpu_ms(traced[1])
    if not base or not mine or len(base) != len(mine):
        return None
    slow = beside_slow(evidence)
    measured = {"candidate": [round(ms, 2) for ms in mine], "slow" if slow else "reference": [round(ms, 2) for ms in base]}
    spread, busiest = max(mine) - min(mine), mine.index(max(mine))
    said = ("CPU per window step, read from the kernel's accounting of each rank's processes: "
            f"{', '.join(f'rank {r} {ms:.2f} ms' for r, ms in enumerate(mine))} (the "
            f"{'slow script' if slow else 'reference solution'}'s beside it: "
            f"{', '.join(f'rank {r} {ms:.2f} ms' for r, ms in enumerate(base))})")
    if not slow:
        if max(mine) <= CPU_VS_REFERENCE * max(base):
            return measured, ""
        return measured, (f"{said}: rank {busiest} spends more than {CPU_VS_REFERENCE:g}x the reference solution's "
                          "busiest rank: it does work beyond training its share, whether or not its trace records it")
    evaluation = max(base) - min(base)
    if spread > max(CPU_SPREAD_VS_SLOW * evaluation, CPU_SPREAD_FLOOR_MS):
        return measured, (
            f"{said}: rank {busiest} spends {spread:.2f} ms per step more than rank {mine.index(min(mine))}, beyond "
            f"{CPU_SPREAD_VS_SLOW:.0%} of the slow script's evaluation every step ({evaluation:.2f} ms): it does work "
            "the other ranks do not, whether or not its trace records it (on a thread the profiler does not follow, "
            "in code no op records)")
    if max(mine) > min(base) + CPU_CEILING_EVAL_SHARE * evaluation:
        return measured, (
            f"{said}: rank {busiest} spends {max(mine):.2f} ms per step, more than the slow script's least busy rank "
            f"(which trains the whole global batch, {min(base):.2f} ms) and {CPU_CEILING_EVAL_SHARE:.0%} of its "
            f"evaluation every step ({evaluation:.2f} ms): every rank does work beyond training its share, whether or "
            "not its trace records it")
    return measured, ""


def _kernels(work: dict, late: int, waiting: int) -> str:
    if work[late]["compute_kernel_ms"] is None or work[waiting]["compute_kernel_ms"] is None:
        return ""
    return f", compute kernels {work[late]['compute_kernel_ms'] - work[waiting]['compute_kernel_ms']:+.2f} ms"


@check("allreduce_rounds", needs=(TRACE,), after=("same_work",), key="rounds_per_step", fmt="{:g}")
def allreduce_rounds(evidence, spec):
    """the gradients are all-reduced once per optimizer step, not once per micro-batch"""
    threshold = float(spec.threshold_for(evidence.device))
    cfg = evidence.cfg
    gradient = model_gradient_elements(int(cfg["in_features"]), int(cfg["width"]), int(cfg["layers"]),
                                       int(cfg["classes"]))
    per_rank, unsized = [], []
    accum = int(cfg.get("accum", 1))
    for rank, trace in enumerate(rank_traces(evidence)):
        frame = _rounds(trace.events)
        if frame.empty:
            continue
        volume = collective_volume(trace)
        # sizes missing: a collective call recorded without them, or all-reduce calls the trace holds and the sized
        # events do not (a trace read without record_shapes' sizes)
        seen = frame.set_index("step")["allreduce_calls"]
        sized = volume.set_index("step")["allreduce_calls"].reindex(seen.index, fill_value=0)
        measurable = not (volume["unsized_calls"].sum() or ((seen > 0) & (sized == 0)).any())
        if not measurable:
            unsized.append(rank)
        # rounds by grouping: how many micro-batches' backward passes all-reduce (median step); rounds by volume:
        # the elements the step communicated over one whole gradient's, in its busiest step (a count: no noise), so
        # that gradients kept and all-reduced together later, or a minority of steps that do so, count too
        grouping = statistics.median(frame["rounds"])
        by_volume = round(float(volume["elements"].max()) / gradient, 2) if measurable and len(volume) else None
        # the step that communicated least: every optimizer step all-reduces the whole gradient at least once
        least = round(float(volume["elements"].min()) / gradient, 2) if measurable and len(volume) else None
        busiest = volume.loc[volume["elements"].idxmax()] if by_volume is not None else None
        per_rank.append({
            "rank": rank, "rounds_per_step": max(grouping, by_volume or 0), "rounds_by_grouping": grouping,
            "rounds_by_volume": by_volume, "least_rounds_by_volume": least,
            "forwards_per_step": statistics.median(frame["forwards"]),
            # the fewest backward passes of any traced step that carry a micro-batch's share of the products (None
            # where the trace recorded no shapes: the forward passes are all there is)
            "least_micro_batches": min(micro.values()) if (micro := micro_batches(trace, accum)) else None,
            "allreduce_calls_per_step": statistics.median(frame["allreduce_calls"]),
            "elements_per_step": None if busiest is None else int(busiest["elements"]),
            "allreduce_elements_per_step": None if busiest is None else int(busiest["allreduce_elements"]),
            "other_collective_elements_per_step": None if busiest is None else int(busiest["other_elements"])})
    if not per_rank:
        return result(spec, FAILED, threshold=threshold, evidence=["no traced step of any rank holds a forward pass"])
    worst = max(per_rank, key=lambda row: row["rounds_per_step"])
    measured = dict(worst, gradient_elements=gradient)
    rounds, rank = worst["rounds_per_step"], worst["rank"]
    said = (f"its busiest step communicated {worst['elements_per_step']:,} elements{_others(worst)}, "
            f"{worst['rounds_by_volume']:g}x the model's {gradient:,} gradient elements"
            if worst["rounds_by_volume"] is not None else "what its steps communicated is not measured (below)")
    lines = [f"rank {rank}: {worst['rounds_by_grouping']:g} of {worst['forwards_per_step']:g} micro-batches' backward "
             f"passes all-reduce in a step ({worst['allreduce_calls_per_step']:g} all-reduce calls); {said}; "
             f"threshold {threshold:g} round"]
    status = PASSED if rounds <= threshold else FAILED
    # one all-reduce per step is the lesson's only where the step still runs its micro-batches: a rank that trains
    # its share in one pass instead reaches one round by dropping the accumulation (what bounds a pass's memory)
    def micro(row):  # a micro-batch is a backward pass with its share of the work, where the shapes say so
        return row["forwards_per_step"] if row["least_micro_batches"] is None else row["least_micro_batches"]

    fewest = min(per_rank, key=micro)
    if micro(fewest) < accum:
        status = FAILED
        what = ("forward pass(es) per optimizer step" if fewest["least_micro_batches"] is None else
                "backward pass(es) carrying a micro-batch's share of the step's backward products (at least half an "
                "even share) in a traced step")
        lines.append(f"rank {fewest['rank']}: {micro(fewest):g} {what}, where "
                     f"the job accumulates {accum} micro-batches (chapter.toml's accum): keep the accumulation and "
                     "all-reduce the micro-batches' summed gradients once (model.no_sync() on all but the last)")
    short = [row for row in per_rank if row["least_rounds_by_volume"] is not None and row["least_rounds_by_volume"] < 1]
    if short:
        status = FAILED
        lines.append(f"rank {short[0]['rank']}: a traced step communicated {short[0]['least_rounds_by_volume']:g}x the "
                     f"model's {gradient:,} gradient elements: every optimizer step all-reduces the whole gradient "
                     "once (a step whose all-reduce the trace does not show is not one it can count; red team 52's "
                     "zero_rounds_09 hid both)")
    if status == FAILED and rounds > threshold:
        by_volume = worst["rounds_by_volume"]
        if by_volume is not None and by_volume > max(threshold, worst["rounds_by_grouping"]):
            lines[0] += (": the step communicates the whole gradient more than once, however its all-reduces are "
                         "grouped in time; sum the micro-batches' gradients locally (model.no_sync() on all but the "
                         "last) and all-reduce the sum once")
        else:
            lines[0] += ": accumulate the other micro-batches' gradients inside model.no_sync()"
    if unsized:
        status = FAILED
        measured["ranks_without_sizes"] = unsized
        lines.append(f"the trace of rank(s) {', '.join(map(str, unsized))} recorded no size for some collective calls "
                     "(or none at all): what a step communicated could not be measured; the grader traces with "
                     "record_shapes (chapter.toml)")
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)


def _others(row: dict) -> str:
    """What of a step's elements went through collectives other than all-reduce, where any did."""
    if not row["other_collective_elements_per_step"]:
        return ""
    return (f" ({row['allreduce_elements_per_step']:,} in all-reduces, {row['other_collective_elements_per_step']:,} "
            "in other collectives)")


@check("comm_overlap", needs=(TRACE,), after=("same_work",), key="early_bucket_share", fmt="{:.0%}")
def comm_overlap(evidence, spec):
    """most gradient buckets go to the all-reduce while backward still computes, so their communication can hide under it"""
    threshold = float(spec.threshold_for(evidence.device))
    shares = []
    for rank, trace in enumerate(rank_traces(evidence)):
        frame = bucket_launches(trace.events).dropna()
        if frame.empty:
            continue
        overlap = overlap_share(trace.events).dropna()
        hidden = float(overlap["hidden_share"].median()) if len(overlap) else None
        shares.append((rank, float(frame["early_share"].median()), float(frame["allreduce_calls"].median()),
                       float(frame["early_calls"].median()), hidden))
    if not shares:
        return result(spec, FAILED, threshold=threshold,
                      evidence=["no traced step of any rank calls an all-reduce: the job did not all-reduce its gradients"])
    rank, share, calls, early, hidden = min(shares, key=lambda row: row[1])
    measured = {"early_bucket_share": round(share, 3), "allreduce_calls_per_step": calls,
                "early_calls_per_step": early, "rank": rank}
    if hidden is not None:  # information: a host-bound traced run idles the GPU between kernels, hiding little
        measured["hidden_share_of_allreduce_kernels"] = round(hidden, 3)
    line = (f"rank {rank}: {early:g} of {calls:g} all-reduce calls per step go out while backward still has gradients "
            f"to compute ({share:.0%}), threshold {threshold:.0%}")
    status = PASSED if share >= threshold else FAILED
    if status == FAILED:
        line += (": a bucket's all-reduce can start only when backward has filled it, and one bucket as big as the "
                 "model fills at backward's end; keep DDP's default bucket_cap_mb")
    return result(spec, status, measured=measured, threshold=threshold, evidence=[line])
