"""What a person reads about one graded run: the checks, what was measured, the hints, and what went unverified."""

from __future__ import annotations

import textwrap

from checker.checks import NOT_SELECTED
from checker.base.paths import display_path

MARKS = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def _where_to_verify(spec, chapter, device: str) -> str:
    """Where a check skipped on this device can run, from chapter.toml: the other device kind it has a threshold for."""
    number = f"{chapter.number:02d}"
    if device == "cpu" and spec.threshold_for("cuda") is not None:
        extra = " --with-ncu" if spec.name.startswith("ncu") else ""
        return f"on a machine with an NVIDIA GPU: `workbook check {number} --device cuda{extra}`"
    if spec.name.startswith("ncu"):
        return f"with Nsight Compute installed: `workbook check {number} --with-ncu`"
    return "not on any device this chapter declares"


def unverified(report, chapter) -> list[str]:
    """For a pass: the checks skipped here (not those left out with --only), each with chapter.toml's reason and
    where it can be verified."""
    specs = {spec.name: spec for spec in chapter.checks}
    lines = []
    for c in report.checks:
        if c.status != "skipped" or (c.reason or "").startswith(NOT_SELECTED) or c.name not in specs:
            continue
        lines.append(f"  - {c.name} ({c.doc}): {c.reason}. Verify it {_where_to_verify(specs[c.name], chapter, report.device)}.")
    return lines


def format_report(report, chapter, learner: bool = False) -> str:
    """The report `workbook check` prints. ``learner``: the learner's own lab, so point at `workbook hint`."""
    number = f"{chapter.number:02d}"
    lines = [
        f"{chapter.id}: {chapter.title}",
        f"candidate {display_path(report.candidate)} ({report.variant}) on {report.device}, "
        f"trace by {report.trace_tool}, {report.wall_s:.0f} s",
        "",
    ]
    width = max(len(c.name) for c in report.checks)
    for c in report.checks:
        lines.append(f"  [{MARKS[c.status]}] {c.name:<{width}}  {c.doc}")
        if c.status == "skipped":
            lines.append(f"         skipped: {c.reason}")
        lines += [f"         - {line}" for line in c.evidence]
        if c.status == "failed" and c.hint:
            hint = "hint: " + " ".join(c.hint.split())
            if learner:
                hint += f" (`workbook hint {number}` for the next step)"
            lines.append(textwrap.indent(textwrap.fill(hint, 96), " " * 9))
    failed = [c.name for c in report.checks if c.status == "failed"]
    notes = [n for n in getattr(report, "notes", []) if not n.startswith("isolation:")]
    lines += [f"  note: {n}" for n in notes]
    if failed:
        lines += ["", f"FAILED: {', '.join(failed)}"]
        return "\n".join(lines)
    left_out = unverified(report, chapter)
    selected = [c.name for c in report.checks if (c.reason or "").startswith(NOT_SELECTED)]
    # the verdict is the last line, whatever comes with it: what a pass here leaves unverified comes first
    if left_out or selected:
        lines += ["", f"Not verified on {report.device}:"]
        lines += [textwrap.fill(line, 110, subsequent_indent="    ") for line in left_out]
        if selected:
            lines.append(f"  - not run (--only): {', '.join(selected)}; `workbook check {number}` runs every check")
    lines.append("")
    if learner and not selected:
        lines.append(f"`workbook solution {number}` now shows the reference solution beside your lab")
    lines.append("PASSED: every check of the chapter ran and passed" if not left_out and not selected else
                 f"PASSED on {report.device}, but not every part of the lesson was verified here (listed above)")
    return "\n".join(line for line in lines if line is not None).rstrip()
