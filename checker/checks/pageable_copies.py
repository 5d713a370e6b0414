"""pageable_copies: no host-to-device copy inside a training step reads pageable memory.

A copy from pageable memory cannot be done by the GPU's copy engine directly: the driver copies the data
through a pinned staging buffer, piece by piece, and the calling thread is held until the last piece is
out. Both traces name the source memory of each copy (nsys: the copy's srcKind; torch.profiler: "Memcpy
HtoD (Pageable -> Device)"); checker.trace pairs each copy with the call that launched it, the CPU time
that call held the thread, and the user's line when the trace has Python frames.

The check counts such copies per traced step, and reports the bytes, bandwidth and CPU time of pageable
and of pinned host-to-device copies, so the difference the fix makes shows in GB/s and milliseconds.
"""

from __future__ import annotations

from checker.checks import FAILED, PASSED, TRACE, check, result
from checker.checks.host_syncs import as_graded, source_line


def copy_line(copies, label: str, steps: int) -> str | None:
    """'2 pageable host-to-device copies per step, 154.1 MB per step at 11.8 GB/s, CPU held 13.2 ms per step'."""
    if copies.empty:
        return None
    total_bytes, gpu_ns = float(copies["bytes"].fillna(0).sum()), float(copies["dur_ns"].sum())
    rate = f" at {total_bytes / gpu_ns:.1f} GB/s" if gpu_ns > 0 else ""
    held = float(copies["cpu_blocked_ns"].sum()) / steps / 1e6
    return (f"{len(copies) / steps:g} {label} host-to-device copies per step, {total_bytes / steps / 1e6:.1f} MB "
            f"per step{rate}, CPU held {held:.1f} ms per step")


@check("pageable_copies", needs=(TRACE,), key="pageable_copies_per_step", fmt="{:g} copies/step")
def pageable_copies(evidence, spec):
    """no host-to-device copy inside a training step reads pageable memory"""
    threshold = float(spec.threshold_for(evidence.device))
    trace = evidence.trace()
    steps = len(trace.get_steps())
    if not steps:
        return result(spec, FAILED, threshold=threshold, evidence=["the trace holds no training steps"])
    copies = trace.get_copies()
    to_device = copies[copies["copy_kind"] == "HtoD"]
    pageable = to_device[to_device["src_kind"] == "pageable"]
    pinned = to_device[to_device["src_kind"] == "pinned"]
    per_step = len(pageable) / steps
    measured = {
        "pageable_copies_per_step": round(per_step, 3),
        "pinned_copies_per_step": round(len(pinned) / steps, 3),
        "steps": steps,
        "trace_tool": evidence.trace_tool,
    }
    for label, part in (("pageable", pageable), ("pinned", pinned)):
        if part.empty:
            continue
        gpu_ns = float(part["dur_ns"].sum())
        measured[f"{label}_mb_per_step"] = round(float(part["bytes"].fillna(0).sum()) / steps / 1e6, 3)
        measured[f"{label}_cpu_held_ms_per_step"] = round(float(part["cpu_blocked_ns"].sum()) / steps / 1e6, 3)
        if gpu_ns > 0:
            measured[f"{label}_gb_per_s"] = round(float(part["bytes"].fillna(0).sum()) / gpu_ns, 2)
    lines = [line for line in (copy_line(pageable, "pageable", steps), copy_line(pinned, "pinned", steps)) if line]
    if to_device.empty:
        lines.append("no host-to-device copies inside steps")
    asked_async = int(pageable["non_blocking_requested"].sum()) if len(pageable) else 0
    if asked_async:
        lines.append(f"{asked_async / steps:g} per step asked for non_blocking=True, but from pageable memory the "
                        "CPU still stages the copy: the source must be pinned")
    if len(pageable):
        for where, count in pageable.groupby("where", dropna=True).size().sort_values(ascending=False).items():
            shown = as_graded(where, evidence.candidate_run, evidence.candidate)
            lines.append(f"{count / steps:g} pageable copies per step from {source_line(shown, evidence.candidate)}")
    status = PASSED if per_step <= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)
