"""throughput: how much faster the candidate trains than the slow script, measured side by side.

Baseline and candidate run in separate processes, alternating (B C, C B, B C, ...), each training the same
steps under the same secret. When a grading worker shares the slow script's speed among its students
(checker.grader.baseline), each candidate window is compared with the median of the worker's latest baseline windows. The grader times each window on its own clock, from the moment the run says
the window opens to the moment its trained weights have arrived, so no clock inside the script counts. Both
train the same samples (the referee checks the weights: same_work), so the speedup is the ratio of the
window times; the median of the trials decides and the spread is their range.
"""

from __future__ import annotations

import statistics

from checker.checks import FAILED, PASSED, TIMED, check, result


@check("throughput", needs=(TIMED,), after=("same_work",), key="speedup", fmt="{:.2f}x")
def throughput(evidence, spec):
    """runs at least the threshold times the slow script's samples/s, measured side by side"""
    threshold = float(spec.threshold_for(evidence.device))
    speed = evidence.speed
    ratios, baseline, candidate = speed.ratios, speed.baseline_windows, speed.candidate_windows
    samples = speed.samples  # the slow script's count, not the candidate's
    speedup = statistics.median(ratios)
    measured = {
        "baseline_samples_per_s": round(statistics.median(samples / b for b in baseline), 1),
        "candidate_samples_per_s": round(statistics.median(samples / c for c in candidate), 1),
        "speedup": round(speedup, 3),
        "speedup_min": round(min(ratios), 3),
        "speedup_max": round(max(ratios), 3),
        "trials": len(candidate),
        "timed_by": "the grader's clock: window opened -> trained weights arrived",
    }
    if speed.shared is not None:
        measured["baseline_shared"] = speed.shared
    line = (
        f"{measured['candidate_samples_per_s']:,.0f} vs {measured['baseline_samples_per_s']:,.0f} samples/s: "
        f"{speedup:.2f}x (trials {min(ratios):.2f}x..{max(ratios):.2f}x), threshold {threshold:.2f}x"
    )
    status = PASSED if speedup >= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=[line])
