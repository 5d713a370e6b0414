"""elementwise_kernels: the candidate's step makes at least `threshold` times fewer elementwise passes over
memory than the slow script's.

A memory-bound chain (sigmoid, gelu, multiply, layer norm, bias, residual) costs one pass over the activation
per kernel, forward and backward. Fusion (torch.compile) turns many passes into a few generated kernels
(triton_poi_*/triton_per_*/triton_red_* on CUDA). Counted in traces of both scripts, same tool, same steps:
on CUDA the elementwise, normalization and reduction kernels (not matrix multiplies, not the optimizer's
multi-tensor kernels); on a CPU the top-level aten ops of that kind. bf16 alone does not lower this count
(autocast adds cast kernels); it makes each pass move fewer bytes, which the throughput check sees.
"""

from __future__ import annotations

from checker.checks import FAILED, PASSED, check, result
from checker.checks.step_counts import baseline_trace, count_elementwise, fewer_by, warmup_seconds


@check("elementwise_kernels", key="elementwise_fewer_by", fmt="{:.1f}x fewer elementwise kernels")
def elementwise_kernels(ev, spec):
    threshold = float(spec.threshold_for(ev.device))
    candidate = count_elementwise(ev.trace(), ev.device)
    baseline = count_elementwise(baseline_trace(ev), ev.device)
    if not candidate.steps or not baseline.steps:
        return result(spec, FAILED, threshold=threshold,
                      evidence=["the trace holds no training steps: nothing to count"])
    ratio = fewer_by(baseline.per_step, candidate.per_step)
    measured = {
        "unit": candidate.unit,
        "baseline_per_step": round(baseline.per_step, 2),
        "candidate_per_step": round(candidate.per_step, 2),
        "elementwise_fewer_by": round(ratio, 2) if ratio != float("inf") else None,
        "steps": candidate.steps,
        "trace_tool": ev.trace_tool,
        **{f"baseline_{k}": v for k, v in baseline.extra.items()},
        **{f"candidate_{k}": v for k, v in candidate.extra.items()},
        **warmup_seconds(ev),  # torch.compile runs in the warm-up steps, outside the timed window
    }
    shown = "all fused away" if ratio == float("inf") else f"{ratio:.1f}x fewer"
    evidence = [
        f"{candidate.per_step:,.1f} {candidate.unit} per step vs the slow script's {baseline.per_step:,.1f}: "
        f"{shown} (threshold {threshold:g}x)"
    ]
    if candidate.top:
        evidence.append(f"most per step here: {candidate.top_text()}")
    if "candidate_warmup_s" in measured:
        cached = measured.get("candidate_warmup_s_cached")
        evidence.append(f"warm-up before the timed window (torch.compile included): up to {measured['candidate_warmup_s']:g} s"
                        + (f", {cached:g} s once cached" if cached is not None else "")
                        + f"; {measured.get('baseline_warmup_s', 0):g} s for the slow script")
    status = PASSED if ratio >= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=evidence)
