"""The `workbook` command: list chapters, run their scripts, check a lab, watch it, hints and solutions, profiling
recipes, read traces.

`main` parses (checker.cli.parser, every command's arguments in one place) and hands each command to its own module:
list_chapters, run, check, watch, hint, solution, assign, grade, profile, report, doctor. A verdict is reached only through
the grader's one entry, checker.grader.evaluate.evaluate.
"""

from __future__ import annotations

import os
import signal
import sys

from checker.base.errors import WorkbookError


def main(argv: list[str] | None = None) -> int:
    from checker.cli.parser import build_parser

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed one usage line
        return 2 if exc.code not in (0, None) else 0
    previous = _stop_on_sigterm()
    try:
        return args.func(args)
    except WorkbookError as err:
        print(f"workbook: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("workbook: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `workbook report ... | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _stop_on_sigterm():
    """`kill` stops a command as Ctrl-C does, so that a check's runs are ended with it (a run's processes are its own
    group, under another user: left running, a spinning loader worker outlived a killed check). The handler it replaced,
    or None off the main thread."""
    def terminated(signum, frame):
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread
        return None


if __name__ == "__main__":
    raise SystemExit(main())
