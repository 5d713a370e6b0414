"""throughput: samples/s of the candidate over the baseline, measured side by side.

Baseline and candidate run in separate processes, alternating (B C, C B, B C, ...), each timing the same
window of steps after its warm-up with a synchronized clock. The speedup is the median of the per-trial
ratios; the spread is their range.
"""

from __future__ import annotations

import statistics

from checker.checks import FAILED, PASSED, check, result


@check("throughput", key="speedup", fmt="{:.2f}x")
def throughput(ev, spec):
    threshold = float(spec.threshold_for(ev.device))
    pairs = ev.pairs()
    ratios = [c.samples_per_s / b.samples_per_s for b, c in pairs]
    speedup = statistics.median(ratios)
    measured = {
        "baseline_samples_per_s": round(statistics.median(b.samples_per_s for b, _ in pairs), 1),
        "candidate_samples_per_s": round(statistics.median(c.samples_per_s for _, c in pairs), 1),
        "speedup": round(speedup, 3),
        "speedup_min": round(min(ratios), 3),
        "speedup_max": round(max(ratios), 3),
        "trials": len(pairs),
    }
    line = (
        f"{measured['candidate_samples_per_s']:,.0f} vs {measured['baseline_samples_per_s']:,.0f} samples/s: "
        f"{speedup:.2f}x (trials {min(ratios):.2f}x..{max(ratios):.2f}x), threshold {threshold:.2f}x"
    )
    status = PASSED if speedup >= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=[line])
