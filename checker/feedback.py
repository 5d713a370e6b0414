"""What a person reads about one graded run: the checks, what was measured, the hints."""

from __future__ import annotations

import textwrap

from checker.paths import display_path

MARKS = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def format_report(report, chapter) -> str:
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
            lines.append(textwrap.indent(textwrap.fill("hint: " + " ".join(c.hint.split()), 96), " " * 9))
    failed = [c.name for c in report.checks if c.status == "failed"]
    notes = [n for n in getattr(report, "notes", []) if not n.startswith("isolation:")]
    lines += [f"  note: {n}" for n in notes]
    lines += ["", "PASSED" if not failed else f"FAILED: {', '.join(failed)}"]
    return "\n".join(lines)
