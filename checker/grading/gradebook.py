"""What the ledger becomes for people: gradebook.csv, one feedback file per student, a summary line.

Everything here is derived from the ledger and rebuilt whole (with the ledger locked), so it is the same
whether the class was graded in one go, resumed after a kill, spread over GPUs or over Slurm tasks.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.grading.files import write_atomic, write_if_changed
from checker.grading.ledger import record_key
from checker.grading.submission import shown_name

GRADEBOOK_NAME = "gradebook.csv"
FEEDBACK_DIR = "feedback"
PASSED, FAILED, ERROR, PENDING = "passed", "failed", "error", "pending"
PENDING_REASON = "not graded yet: run the same grade command again to resume"

# what every column means is written down in docs/instructors.md ("What each column means")
LEADING = ("student", "verdict")
TRAILING = ("speedup", "reason", "device", "gpu_name", "wall_s", "graded_at", "submission_sha256", "workbook_version")


def columns(chapter) -> list[str]:
    return [*LEADING, *(c.name for c in chapter.checks), *TRAILING]


def current_record(latest: dict[tuple, dict], chapter_id: str, student: str, sha: str, device: str,
                   trace_tool: str, assignment: str | None = None) -> dict[str, Any] | None:
    """The latest record for this student's submission as it is now, graded the way asked now (for chapter 08,
    under the same secret)."""
    return latest.get(record_key({"student": student, "chapter": chapter_id, "submission_sha256": sha,
                                  "device": device, "trace_tool": trace_tool, "assignment": assignment}))


def cell(check: dict[str, Any]) -> str:
    """One check's gradebook cell from its report (CheckResult.to_json()): the status and the number that sums
    it up; for a failure, the measure that decided it, such as `failed (weight distance 0.54 > 0.1)`."""
    from checker.checks import FAILED, FAILURE_MEASURE, KEY_MEASURE

    status, measured = check["status"], check.get("measured") or {}
    if status == FAILED and check["name"] in FAILURE_MEASURE:
        decided = FAILURE_MEASURE[check["name"]](measured, check.get("threshold"))
        return status if decided is None else f"{status} ({decided})"
    key, fmt = KEY_MEASURE.get(check["name"], (None, None))
    value = measured.get(key) if key else None
    return status if value is None else f"{status} ({fmt.format(value)})"


def cells_of(record: dict[str, Any]) -> dict[str, str]:
    """The cells of a graded record, from its report when it has one (so that a rebuilt gradebook says what
    decided each verdict even for students graded before the cells did), else as recorded."""
    checks = (record.get("report") or {}).get("checks")
    if checks:
        return {c["name"]: cell(c) for c in checks}
    return record.get("cells", {})


def row_for(chapter, student: str, sha: str, record: dict[str, Any] | None) -> dict[str, Any]:
    row = dict.fromkeys(columns(chapter), "")
    row.update(student=student, submission_sha256=sha)
    if record is None:
        row.update(verdict=PENDING, reason=PENDING_REASON)
        return row
    cells = cells_of(record)
    row.update({name: cells.get(name, "") for name in (c.name for c in chapter.checks)})
    speedup = record.get("speedup")
    row.update(verdict=record["verdict"], reason=record.get("reason") or "", device=record.get("device", ""),
               gpu_name=record.get("gpu_name") or "", wall_s=f"{record['wall_s']:.1f}",
               graded_at=record.get("graded_at", ""), workbook_version=record.get("workbook_version", ""),
               speedup="" if speedup is None else f"{speedup:.2f}")
    return row


def render_csv(chapter, rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns(chapter), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def rebuild(out: Path, chapter, class_hashes: dict[str, str], latest: dict[tuple, dict], device: str,
            trace_tool: str, assignment: str | None = None) -> list[dict[str, Any]]:
    """Write gradebook.csv and every graded student's feedback file from the ledger (call it locked)."""
    rows = []
    for student, sha in sorted(class_hashes.items()):
        record = current_record(latest, chapter.id, student, sha, device, trace_tool, assignment)
        rows.append(row_for(chapter, student, sha, record))
        if record is not None:
            write_if_changed(out / FEEDBACK_DIR / f"{student}.md", record["feedback"])
    write_atomic(out / GRADEBOOK_NAME, render_csv(chapter, rows))
    return rows


@dataclass
class Summary:
    passed: int
    failed: int
    errors: int
    pending: int

    @classmethod
    def of(cls, rows: list[dict[str, Any]]) -> "Summary":
        count = lambda verdict: sum(row["verdict"] == verdict for row in rows)  # noqa: E731
        return cls(count(PASSED), count(FAILED), count(ERROR), count(PENDING))

    @property
    def line(self) -> str:
        total = self.passed + self.failed + self.errors + self.pending
        text = (f"{total} submissions: {self.passed} passed, {self.failed} failed, "
                f"{self.errors} could not be graded")
        return text + (f", {self.pending} not graded yet" if self.pending else "")

    @property
    def exit_code(self) -> int:
        """0: every submission got a verdict; 3: some could not be graded (error), none is left to grade;
        4: some are not graded yet (an interrupted run, Slurm tasks still running or lost): run it again."""
        if self.pending:
            return 4
        return 3 if self.errors else 0


def table(chapter, rows: list[dict[str, Any]], width: int = 70) -> str:
    """The gradebook as a person reads it in a terminal: student, verdict, the checks, and reasons if any."""
    shown = [*LEADING, *(c.name for c in chapter.checks)]
    if any(row["reason"] and row["verdict"] != PENDING for row in rows) or any(row["verdict"] == PENDING for row in rows):
        shown.append("reason")
    # a cell with a newline (a student folder may be called anything) would break the table: escaped, one line
    cells = [[text if len(text) <= width else text[:width - 1] + "…"
              for text in (shown_name(str(row[name])) for name in shown)] for row in rows]
    widths = [max(len(name), *(len(line[i]) for line in cells)) for i, name in enumerate(shown)]
    lines = ["  ".join(name.ljust(w) for name, w in zip(shown, widths)).rstrip()]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in cells]
    return "\n".join(lines)
