"""The judging loop: every check of a chapter, in its order, on the grader's evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from checker.checks import FAILED, KINDS, SKIPPED, CheckResult, result
from checker.checks.evidence import Evidence, TraceMismatch

if TYPE_CHECKING:
    from checker.base.chapters import Chapter


def judge(chapter: "Chapter", skipped: dict[str, str], evidence: Evidence | None, incomplete: Exception | None,
          device: str) -> list[CheckResult]:
    """Each of the chapter's checks, in order, on the evidence: skipped as planned (``skipped``: check name -> why,
    the grader's plan), skipped when a check it comes after did not pass, failed with its hint. ``incomplete``: the
    candidate did not run every step (the runs' error), so there is no evidence and every check fails or skips."""
    results: list[CheckResult] = []
    status: dict[str, str] = {}
    for spec in chapter.checks:
        kind = KINDS[spec.name]
        threshold = spec.threshold_for(device)
        skip = skipped.get(spec.name)
        unmet = [name for name in kind.after if status.get(name) == FAILED]
        if skip is None and unmet:
            skip = (f"{', '.join(unmet)} failed, so this is not measured: "
                    + "; ".join(chapter.check(name).doc for name in unmet))
        if skip is None and incomplete is not None and FAILED in status.values():
            skip = "the candidate did not run every step, so nothing else can be measured"
        if skip is not None:
            outcome = result(spec, SKIPPED, reason=skip, threshold=threshold)
        elif incomplete is not None:
            outcome = result(spec, FAILED, evidence=[str(incomplete)])
        else:
            try:
                outcome = kind(evidence, spec)
            except TraceMismatch as err:
                outcome = result(spec, FAILED, evidence=[str(err)], threshold=threshold)
        status[spec.name] = outcome.status
        results.append(outcome)
    failed = {r.name for r in results if r.status == FAILED}
    for outcome in results:
        if outcome.status == FAILED:  # a hint agrees with the other checks' evidence (chapter.toml's when_passed)
            outcome.hint = chapter.hint_for(outcome.name, outcome.evidence, failed - {outcome.name})
    return results
