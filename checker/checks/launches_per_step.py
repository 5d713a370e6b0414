"""launches_per_step: the candidate's step launches at least `threshold` times fewer kernels than the slow script's.

Both scripts are traced with the same tool over the same steps after warm-up. On CUDA the count is host launch
calls (cudaLaunchKernel, cuLaunchKernel from Triton, cudaGraphLaunch: one per graph replay, however many
kernels the graph holds); on a CPU it is top-level aten ops, each of which would be at least one launch on a
GPU. Fewer launches is what lets a launch-bound step go faster: the host time per step is roughly launches
times a few microseconds.
"""

from __future__ import annotations

from checker.checks import FAILED, PASSED, check, result
from checker.checks.step_counts import baseline_trace, count_launches, fewer_by, warmup_seconds


@check("launches_per_step", key="launches_fewer_by", fmt="{:.1f}x fewer launches")
def launches_per_step(ev, spec):
    threshold = float(spec.threshold_for(ev.device))
    candidate = count_launches(ev.trace(), ev.device)
    baseline = count_launches(baseline_trace(ev), ev.device)
    if not candidate.steps or not baseline.steps:
        return result(spec, FAILED, threshold=threshold,
                      evidence=["the trace holds no training steps: nothing to count"])
    ratio = fewer_by(baseline.per_step, candidate.per_step)
    measured = {
        "unit": candidate.unit,
        "baseline_per_step": round(baseline.per_step, 2),
        "candidate_per_step": round(candidate.per_step, 2),
        "launches_fewer_by": round(ratio, 2) if ratio != float("inf") else None,
        "steps": candidate.steps,
        "trace_tool": ev.trace_tool,
        **{f"baseline_{k}": v for k, v in baseline.extra.items()},
        **{f"candidate_{k}": v for k, v in candidate.extra.items()},
        **warmup_seconds(ev),  # torch.compile runs in the warm-up steps, outside the timed window
    }
    shown = "all gone" if ratio == float("inf") else f"{ratio:.1f}x fewer"
    evidence = [
        f"{candidate.per_step:,.0f} {candidate.unit} per step vs the slow script's {baseline.per_step:,.0f}: "
        f"{shown} (threshold {threshold:g}x)"
    ]
    if candidate.top:
        evidence.append(f"most per step here: {candidate.top_text(8)}")
    if "graph_launches_per_step" in candidate.extra and candidate.extra["graph_launches_per_step"]:
        evidence.append(f"{candidate.extra['graph_launches_per_step']:g} CUDA graph replays per step, "
                        f"{candidate.extra['gpu_kernels_per_step']:,.0f} GPU kernels per step in all")
    if "candidate_warmup_s" in measured:
        cached = measured.get("candidate_warmup_s_cached")
        evidence.append(f"warm-up before the timed window (torch.compile included): up to {measured['candidate_warmup_s']:g} s"
                        + (f", {cached:g} s once cached" if cached is not None else "")
                        + f"; {measured.get('baseline_warmup_s', 0):g} s for the slow script")
    status = PASSED if ratio >= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=evidence)
