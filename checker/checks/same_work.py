"""same_work: the candidate trains the same samples and ends at the baseline's loss.

The loss is not what the script prints: checker.launch evaluates the model the session built on the
chapter's held-out batch after the script returns.
"""

from __future__ import annotations

import statistics

from checker.checks import FAILED, PASSED, check, result


@check("same_work", key="relative_difference", fmt="{:.1%} loss diff")
def same_work(ev, spec):
    tolerance = float(spec.options.get("rel_tolerance", 0.05))
    # a trained model's loss can be tiny, where a relative tolerance alone is too tight for run-to-run noise
    abs_tolerance = float(spec.options.get("abs_tolerance", 0.0))
    pairs = ev.pairs()
    base_loss = statistics.median(b.eval_loss for b, _ in pairs)
    cand_loss = statistics.median(c.eval_loss for _, c in pairs)
    base_samples, cand_samples = pairs[0][0].samples, pairs[0][1].samples
    measured = {
        "baseline_eval_loss": round(base_loss, 5),
        "candidate_eval_loss": round(cand_loss, 5),
        "relative_difference": round(abs(cand_loss - base_loss) / abs(base_loss), 5),
        "baseline_samples": base_samples,
        "candidate_samples": cand_samples,
    }
    evidence = []
    if cand_samples != base_samples:
        evidence.append(f"work differs: the candidate trained {cand_samples} samples in the window, the baseline {base_samples}")
    if measured["relative_difference"] > tolerance and abs(cand_loss - base_loss) > abs_tolerance:
        evidence.append(
            f"work differs: held-out loss {cand_loss:.4f} vs the baseline's {base_loss:.4f} "
            f"({measured['relative_difference']:.1%} apart; tolerance {tolerance:.0%} or {abs_tolerance:g} absolute)"
        )
    status = FAILED if evidence else PASSED
    return result(spec, status, measured=measured, threshold=tolerance, evidence=evidence)
