"""What several commands share: the progress lines of a check, the names --only gives, whether torch sees a GPU."""

from __future__ import annotations

import os
import sys

from checker.base.errors import WorkbookError


def progress_printer():
    """On a terminal, one line per run of a script, with the time so far (a GPU check takes minutes), and where
    each run's seconds went; nothing when stderr is a file or a pipe, so that logs and tests see only results
    and errors, unless WORKBOOK_PROGRESS=1 asks for the lines there too."""
    if not (sys.stderr.isatty() or os.environ.get("WORKBOOK_PROGRESS") == "1"):
        return None
    import time

    started = time.perf_counter()

    def show(line: str) -> None:
        print(f"  [{time.perf_counter() - started:5.0f} s] {line}", file=sys.stderr, flush=True)

    return show


def names(text: str | None, what: str, example: str) -> list[str] | None:
    """--only's names, in the order given; none is refused: `--only ""` (an unset shell variable) would run every
    check, or grade every student."""
    if text is None:
        return None
    given = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not given:
        raise WorkbookError(f"--only {text!r}: names no {what}; give one or more, e.g. --only {example}")
    return given


def only_checks(text: str | None) -> set[str] | None:
    """The checks --only names (None: every check)."""
    given = names(text, "check", "host_syncs")
    return None if given is None else set(given)


def has_cuda() -> bool:
    from checker.grader.evaluate import cuda_available

    return cuda_available()
