"""data_wait: how much of a training step is spent waiting for the next batch, from the candidate's trace.

The harness fetches each batch inside the step, under a range named ``data`` (NVTX for nsys,
record_function for torch.profiler), so the wait for the DataLoader is that range's length
(``TraceAnalysis.get_data_wait``). The check sums it over the traced steps (logging steps excepted) and
divides by the steps' total length.

It also reports the step-time distribution the harness measured in the timed runs (p50, p90, max, mean):
the median alone can lie. With too few workers most steps find a batch ready and are fast, while every few
steps the queue runs dry and one step waits for a whole batch to be made; p50 stays low, the mean (which
sets throughput) does not.
"""

from __future__ import annotations

from checker.base.stats import describe_step_times, step_time_stats
from checker.checks import FAILED, PASSED, TRACE, check, result


@check("data_wait", needs=(TRACE,), key="data_wait_fraction", fmt="{:.0%} of the step", data_wait_is_work=True)
def data_wait(evidence, spec):
    """the step waits for its next batch at most the threshold's share of its time"""
    threshold = float(spec.threshold_for(evidence.device))
    trace = evidence.trace()
    traced = [int(s) for s in trace.get_steps()["step"]]
    log_steps = {s for s in traced if evidence.is_log_step(s)}
    # an epoch's first batch waits for the workers to start on the epoch (a DataLoader prefetches within an epoch
    # only): that wait is the epoch's start, not the loader's steady state (samples_in_workers still counts any
    # sample the training process made in that step)
    epoch = int(evidence.cfg.get("epoch_batches") or 0)
    epoch_starts = {s for s in traced if epoch and s and s % epoch == 0}
    # the chapter's dataset making samples in the training process counts as waiting for them, inside the `data`
    # range or after it (a loader of workers that hand out keys, the samples made in the step, waits for nothing)
    loading = spec.options.get("loading_frames")
    # and so do the frames that made a sample, found by what they called (the decoder, an augmentation's op):
    # whatever the script named its copy of the dataset's code (checker.trace.analyses.dataloader)
    preparing = spec.options.get("preparing_calls")
    waits = trace.get_data_wait(exclude_steps=log_steps | epoch_starts, loading=loading, preparing=preparing)
    if waits.empty:
        return result(spec, FAILED, threshold=threshold, evidence=["the trace holds no training steps outside logging steps"])
    total_wait, total_step = int(waits["data_wait_ns"].sum()), int(waits["step_ns"].sum())
    fraction = total_wait / total_step if total_step else 0.0
    worst = waits.loc[waits["data_wait_ns"].idxmax()]
    counted = len(waits)
    # step times for the "median can lie" lesson: the timed runs' when a check made them, else (under --only)
    # the traced run's alone, so that reading the trace costs one run of the script
    pairs = evidence.timed
    candidate_ms = [ms for _, c in pairs for ms in c.step_ms] if pairs else evidence.candidate_run.step_ms
    baseline_ms = [ms for b, _ in pairs for ms in b.step_ms]
    measured = {
        "data_wait_fraction": round(fraction, 4),
        "data_wait_ms_per_step": round(total_wait / counted / 1e6, 3),
        "step_ms_traced": round(total_step / counted / 1e6, 3),
        "worst_step": int(worst["step"]),
        "worst_step_wait_ms": round(int(worst["data_wait_ns"]) / 1e6, 3),
        "steps": counted,
        "measured_from": str(waits["source"].iloc[0]),
        "logging_steps_excluded": sorted(log_steps),
        "epoch_starts_excluded": sorted(epoch_starts),
        "trace_tool": evidence.trace_tool,
        "candidate_step_ms": step_time_stats(candidate_ms),
        "baseline_step_ms": step_time_stats(baseline_ms) if baseline_ms else None,
    }
    lines = [
        f"waiting for the next batch: {fraction:.0%} of the step ({total_wait / counted / 1e6:.1f} ms of "
        f"{total_step / counted / 1e6:.1f} ms per step over {counted} traced steps; the longest wait "
        f"{int(worst['data_wait_ns']) / 1e6:.1f} ms in step {int(worst['step'])}), threshold {threshold:.0%}",
        f"candidate {describe_step_times(candidate_ms)}" + ("" if pairs else " (traced run)"),
    ]
    if baseline_ms:
        lines.append(f"baseline {describe_step_times(baseline_ms)}")
    status = PASSED if fraction <= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)
