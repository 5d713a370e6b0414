"""`workbook grade`: a class at once; what it does is checker.grading.command's, this module only answers the terminal (its signals and its errors)."""

from __future__ import annotations

import argparse
import sys

from checker.base.errors import WorkbookError
from checker.grading.command import grade_class


def cmd_grade(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # `kill`, scancel: checker.cli.main turns SIGTERM into KeyboardInterrupt for every command, so every student's
    # grading stops and nothing half-done is recorded
    try:
        return grade_class(args, say)
    except KeyboardInterrupt:  # 130, the shell's code for Ctrl-C (SIGTERM too): a script can tell it from 4
        print("workbook: grading interrupted: what was graded so far is in the ledger; run the same command again "
              "to resume", file=sys.stderr)
        return 130
    except OSError as err:  # a full disk, a folder that vanished: what was graded so far is in the ledger
        raise WorkbookError(f"grading stopped: {err.strerror or err} ({err.filename or 'no file'}); what was "
                            "graded so far is in the ledger: run the same command again to resume") from None
