"""`workbook solution`: the reference solution as a diff against the lab, once the lab has passed here."""

from __future__ import annotations

import argparse
import sys

from checker.base.chapters import get_chapter


def cmd_solution(args: argparse.Namespace) -> int:
    from checker.learner.hints import solution_diff

    diff, note = solution_diff(get_chapter(args.chapter), force=args.force)
    if note:
        print(note, file=sys.stderr)
    sys.stdout.write(diff)
    return 0
