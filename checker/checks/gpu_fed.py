"""gpu_fed: the GPU has work queued while the host prepares the next batch, from the grader's trace.

What a host sync costs in a loop that prepares its batches on the host is not the wait inside the sync: it is
what follows. The sync returns when the GPU has run out of work, so the host prepares the next batch while the
GPU has nothing to run; the two take turns. Without the sync the host prepares batch N+1 while the GPU still
runs step N. This check measures that directly: the share of the data waits (the harness's ``data`` ranges)
during which the GPU ran nothing (``TraceAnalysis.get_data_wait_gpu_idle``).

It judges the effect, not the call that caused it, so a sync that a trace does not name (a loop polling
``event.query()``, a read on another thread, a sleep until the GPU is done) fails it as ``.item()`` does.
Logging steps, where reads are allowed, and the step after each are left out. A CPU trace has no GPU: the
check is skipped there (chapter.toml says so).
"""

from __future__ import annotations

from checker.checks import FAILED, PASSED, TRACE, check, result


@check("gpu_fed", needs=(TRACE,), key="data_wait_gpu_idle_fraction", fmt="{:.0%} of the data wait idle")
def gpu_fed(evidence, spec):
    """the GPU runs the previous step's work while the host prepares the next batch"""
    threshold = float(spec.threshold_for(evidence.device))
    trace = evidence.trace()
    steps = [int(s) for s in trace.get_steps()["step"]]
    logged = {s for s in steps if evidence.is_log_step(s)}
    left_out = logged | {s + 1 for s in logged}
    fed = trace.get_data_wait_gpu_idle(exclude_steps=left_out)
    if fed.empty:
        why = "the trace holds no GPU work" if steps else "the trace holds no training steps"
        if steps and trace.gpu_clock_skew:  # GPU work there is, on a clock the host's steps cannot be read against
            why = "the trace's GPU time stamps are off from the host's (clock skew)"
        return result(spec, FAILED, threshold=threshold, evidence=[f"{why}: nothing shows the GPU kept busy"])
    wait, idle, after_sync = (int(fed[c].sum()) for c in ("data_wait_ns", "gpu_idle_ns", "after_sync_ns"))
    if wait <= 0:
        return result(spec, FAILED, threshold=threshold,
                      evidence=[f"no `data` ranges in {len(fed)} traced steps: batches must come from session.steps()"])
    fraction = idle / wait
    counted = len(fed)
    measured = {
        "data_wait_gpu_idle_fraction": round(fraction, 4),
        "data_wait_ms_per_step": round(wait / counted / 1e6, 3),
        "gpu_idle_in_data_ms_per_step": round(idle / counted / 1e6, 3),
        "idle_after_a_sync_ms_per_step": round(after_sync / counted / 1e6, 3),
        "steps": counted,
        "steps_left_out": sorted(s for s in left_out if s in steps),
        "trace_tool": evidence.trace_tool,
    }
    line = (f"the GPU ran nothing through {fraction:.0%} of the batch preparation ({idle / counted / 1e6:.2f} of "
            f"{wait / counted / 1e6:.2f} ms per step over {counted} traced steps), threshold {threshold:.0%}")
    lines = [line]
    if after_sync and after_sync >= idle / 2:
        lines.append(f"{after_sync / counted / 1e6:.2f} ms per step of it began inside a host sync: the sync emptied "
                     "the GPU's queue, then the host prepared the next batch with nothing queued behind it")
    status = PASSED if fraction <= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)
