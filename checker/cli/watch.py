"""`workbook watch`: check the lab each time it is saved; on a pass, go on to the next chapter."""

from __future__ import annotations

import argparse

from checker.cli import shared
from checker.cli.check import check_and_print


def cmd_watch(args: argparse.Namespace) -> int:
    from checker.learner.watch import watch_labs

    only = shared.only_checks(args.only)
    return watch_labs(args.chapter, lambda chapter: check_and_print(chapter, device=args.device, only=only).passed)
