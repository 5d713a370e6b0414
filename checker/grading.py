"""Grade a class: every submission of one chapter, a gradebook (CSV) and a feedback file per student.

    workbook grade 01 submissions/ --out grades/

``submissions/`` holds one folder per student with the lab file in it (``alice/train.py``, or
``alice/labs/01_item_syncs/train.py``). Each is graded exactly as ``workbook check --submission`` would,
one after another (never in parallel: speed is measured). A submission that crashes, hangs or lacks the
file gets the verdict "error" and its one-line reason; the others are graded all the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from checker.chapters import Chapter
from checker.checks import KEY_MEASURE
from checker.errors import WorkbookError
from checker.evaluate import evaluate
from checker.feedback import format_report


def _cell(check) -> str:
    """One gradebook cell: the status and the number that sums the check up."""
    key, fmt = KEY_MEASURE.get(check.name, (None, None))
    value = check.measured.get(key) if key else None
    return check.status if value is None else f"{check.status} ({fmt.format(value)})"


def grade_all(chapter: Chapter, submissions: Path, out: Path, device: str | None = None, trace_tool: str = "torch",
              progress: Callable[[str], None] = lambda line: None) -> pd.DataFrame:
    submissions = Path(submissions)
    if not submissions.is_dir():
        raise WorkbookError(f"{submissions}: not a folder of submissions")
    students = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not students:
        raise WorkbookError(f"{submissions} holds no submission folders (one folder per student, each with {chapter.lab_file})")
    feedback_dir = Path(out) / "feedback"
    feedback_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for number, student in enumerate(students, 1):
        progress(f"[{number}/{len(students)}] {student.name}")
        row = {"student": student.name}
        try:
            report = evaluate(chapter, submission=student, device=device, trace_tool=trace_tool)
        except WorkbookError as err:  # a crash, a hang, a missing file: this student's error, not the class's
            row.update(verdict="error", reason=str(err))
            text = f"{chapter.id}: {chapter.title}\n\nyour submission could not be graded: {err}\n"
        else:
            row.update(verdict="passed" if report.passed else "failed", reason="", device=report.device,
                       wall_s=round(report.wall_s, 1), **{c.name: _cell(c) for c in report.checks})
            text = format_report(report, chapter) + "\n"
        (feedback_dir / f"{student.name}.md").write_text(text)
        rows.append(row)
    columns = ["student", "verdict", *(c.name for c in chapter.checks), "reason", "device", "wall_s"]
    gradebook = pd.DataFrame(rows).reindex(columns=columns).fillna("")
    gradebook.to_csv(Path(out) / "gradebook.csv", index=False)
    return gradebook
