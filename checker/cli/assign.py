"""`workbook assign`: chapter 08's mystery jobs, drawn for a learner."""

from __future__ import annotations

import argparse
import sys

from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path


def cmd_assign(args: argparse.Namespace) -> int:
    from checker.grader.assignment import PRACTICE_LEARNER, SECRET_ENV, draw

    chapter = get_chapter(args.chapter)
    if not chapter.raw.get("jobs"):
        raise WorkbookError(f"chapter {chapter.id} has no mystery jobs to assign")
    found = draw(chapter, args.learner or PRACTICE_LEARNER)
    text = found.to_toml()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    path = chapter.lab_script.parent / "assignment.toml"
    path.write_text(text)
    print(f"wrote {display_path(path)}: jobs {', '.join(found.codes)} for learner {found.learner!r}, from the "
          + ("course secret" if found.secret_kind == "course" else f"public practice secret ({SECRET_ENV} unset)"))
    return 0
