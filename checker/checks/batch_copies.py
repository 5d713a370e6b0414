"""batch_copies: every training step copies its batch to the GPU, as many bytes as the slow script's step copies.

A chapter whose lesson is the copy of each batch to the device (chapter 02) has a second road to its speed when
its batches repeat: keep them on the GPU and copy nothing. The speed then says nothing about the copy. This check
counts, step by step in the traced window, the host-to-device bytes each step launched (pinned or pageable: both
trace tools give a copy's bytes), and holds every step, not their median, to the slow script's per-step bytes
over the same steps: each must copy at least ``threshold`` (a share) of the slow script's median step. Only the
last traced step is spared (a script that copies each batch one step ahead, as chapter 02's stretch solution does,
has nothing to copy there). A step that trained on a batch kept
on the device copies nothing and fails it; so does a window that copies every batch at once in one step.
"""

from __future__ import annotations

from checker.checks import BASELINE_TRACE, FAILED, PASSED, TRACE, check, result


def bytes_per_step(trace) -> tuple[dict[int, float], int]:
    """Host-to-device bytes launched in each step of ``trace`` (every step listed, 0 where none), and how many of
    its copies gave no byte count."""
    steps = [int(step) for step in trace.get_steps()["step"]]
    copies = trace.get_copies()
    to_device = copies[copies["copy_kind"] == "HtoD"]
    unknown = int(to_device["bytes"].isna().sum())
    per_step = to_device.groupby("step")["bytes"].sum(min_count=1).fillna(0)
    return {step: float(per_step.get(step, 0)) for step in steps}, unknown


@check("batch_copies", needs=(TRACE, BASELINE_TRACE), key="least_share", fmt="{:.0%} of the slow script's bytes")
def batch_copies(evidence, spec):
    """every training step copies its batch to the GPU: at least the slow script's host-to-device bytes per step"""
    share = float(spec.threshold_for(evidence.device))
    candidate, candidate_unknown = bytes_per_step(evidence.trace())
    baseline, baseline_unknown = bytes_per_step(evidence.trace("baseline"))
    if not candidate or not baseline:
        return result(spec, FAILED, threshold=share, evidence=["the trace holds no training steps: nothing to count"])
    ordered = sorted(baseline.values())
    expected = ordered[len(ordered) // 2]
    if expected <= 0:
        why = (f"{baseline_unknown} of its copies give no byte count" if baseline_unknown
               else "it copies nothing to the device")
        return result(spec, FAILED, threshold=share, evidence=[
            f"the slow script's trace cannot say how many bytes a step copies ({why}): the check cannot be judged"])
    floor = expected * share
    short = {step: copied for step, copied in candidate.items() if copied < floor}
    last = max(candidate)
    # a prefetcher copies each batch one step ahead, so the last traced step has no next batch to copy: it alone
    # may copy less (one step's copy of many: no speed to be had from it)
    spared = short.pop(last, None) if len(candidate) > 1 else None
    least = min(copied for step, copied in candidate.items() if step != last or spared is None)
    measured = {
        "baseline_mb_per_step": round(expected / 1e6, 3),
        "candidate_least_mb": round(least / 1e6, 3),
        "candidate_median_mb": round(sorted(candidate.values())[len(candidate) // 2] / 1e6, 3),
        "least_share": round(least / expected, 4),
        "steps_short": len(short),
        "steps": len(candidate),
        "trace_tool": evidence.trace_tool,
    }
    lines = [f"the least a traced step copies to the device: {least / 1e6:,.1f} MB; the slow script's step copies "
             f"{expected / 1e6:,.1f} MB"]
    if short:
        shown = ", ".join(f"{step} ({copied / 1e6:,.1f} MB)" for step, copied in sorted(short.items())[:5])
        lines.append(f"{len(short)} of {len(candidate)} traced steps copy less than {floor / 1e6:,.1f} MB: "
                     f"{shown}{', ...' if len(short) > 5 else ''}. A step that trains on data already on the "
                     "device, or copies its batch in another step, does not count as copying it")
    if spared is not None:
        lines.append(f"the last traced step ({last}) copies {spared / 1e6:,.1f} MB: a script that copies each batch a "
                     "step ahead has nothing left to copy there, so it is not held to the rest")
    if candidate_unknown:
        lines.append(f"{candidate_unknown} host-to-device copies in the steps give no byte count and count as none")
    status = PASSED if not short else FAILED
    return result(spec, status, measured=measured, threshold=share, evidence=lines)
