"""`workbook hint`: the next hint for the check the lab last failed."""

from __future__ import annotations

import argparse

from checker.base.chapters import get_chapter


def cmd_hint(args: argparse.Namespace) -> int:
    from checker.learner.hints import next_hint

    print(next_hint(get_chapter(args.chapter)))
    return 0
