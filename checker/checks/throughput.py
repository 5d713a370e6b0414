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


# When the timed pairs may stop (checker.grader.plan adds pairs only while a verdict is unclear): one pair decides
# when it is this far from the threshold (the fast-verdict issue's "at least 15% over"); more pairs decide when
# every one of them is on the same side and their median is at least CLOSE away.
ONE_PAIR_MARGIN = 0.15
CLOSE = 0.05


def settled(speed, spec, device: str) -> bool:
    """True when more timed pairs could not change the verdict: the ratios so far are clearly on one side."""
    threshold = float(spec.threshold_for(device))
    margin = float(spec.options.get("settle_margin", ONE_PAIR_MARGIN))
    ratios = speed.ratios
    if not ratios:
        return False
    if len(ratios) == 1:
        return ratios[0] >= threshold * (1 + margin) or ratios[0] <= threshold * (1 - margin)
    middle = statistics.median(ratios)
    same_side = min(ratios) >= threshold or max(ratios) < threshold
    return same_side and abs(middle - threshold) >= CLOSE * threshold


@check("throughput", needs=(TIMED,), after=("same_work",), key="speedup", fmt="{:.2f}x", settled=settled)
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
        "settled": settled(speed, spec, evidence.device),
        "timed_by": "the grader's clock: window opened -> trained weights arrived",
    }
    if speed.shared is not None:
        measured["baseline_shared"] = speed.shared
    line = (
        f"{measured['candidate_samples_per_s']:,.0f} vs {measured['baseline_samples_per_s']:,.0f} samples/s: "
        f"{speedup:.2f}x ({_trials(ratios)}), threshold {threshold:.2f}x"
    )
    lines = [line] + _scaling(evidence, measured)
    status = PASSED if speedup >= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)


def _scaling(evidence, measured: dict) -> list[str]:
    """A data-parallel job's scaling efficiency, reported beside its speed (not graded): its samples/s against
    ``world`` times what the same script reaches as one rank of the same per-rank batch."""
    one = evidence.one_rank
    world = int(evidence.cfg.get("world_size", 1))
    if one is None or not one.samples_per_s or world < 2:
        return []
    efficiency = measured["candidate_samples_per_s"] / (world * one.samples_per_s)
    measured["one_rank_samples_per_s"] = round(one.samples_per_s, 1)
    measured["scaling_efficiency"] = round(efficiency, 3)
    return [f"scaling: {world} ranks at {measured['candidate_samples_per_s']:,.0f} samples/s, one rank of the same "
            f"per-rank batch at {one.samples_per_s:,.0f}: {efficiency:.0%} of {world}x (reported, not graded)"]


def _trials(ratios) -> str:
    if len(ratios) == 1:
        return f"one timed pair: clear of the threshold by more than {ONE_PAIR_MARGIN:.0%}"
    return f"{len(ratios)} timed pairs, {min(ratios):.2f}x..{max(ratios):.2f}x"
