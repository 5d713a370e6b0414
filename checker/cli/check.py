"""`workbook check`: grade one script of a chapter, print the report; with --ladder, measure the reference solution's ladder after."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from checker.cli import shared
from checker.learner.feedback import format_report


def check_and_print(chapter, *, variant="lab", submission=None, device=None, trace_tool="torch", with_ncu=False,
                     keep_traces=None, only=None, as_json=False):
    """Grade the candidate through the grader's one entry (checker.grader.evaluate: a syntax error is reported
    before anything runs) and print the report; a check of the learner's own lab is recorded in the progress file."""
    from checker.grader.evaluate import evaluate

    own_lab = variant == "lab" and submission is None
    if own_lab:
        from checker.learner import progress

        checked = progress.lab_hash(chapter.id)  # the lab as this check reads it, before any run starts
    report = evaluate(chapter, variant=variant, submission=submission, device=device, trace_tool=trace_tool,
                      with_ncu=with_ncu, keep_traces=keep_traces, only=only, progress=shared.progress_printer())
    if own_lab:
        progress.record_check(report, lab_sha256=checked)
    print(json.dumps(report.to_json(), indent=2) if as_json else format_report(report, chapter, learner=own_lab),
          flush=True)
    return report


def cmd_check(args: argparse.Namespace) -> int:
    chapter = get_chapter(args.chapter)
    if args.ladder_trials is not None and args.ladder_trials < 1:
        raise WorkbookError(f"--ladder-trials {args.ladder_trials}: give 1 or more")
    if args.ladder or args.ladder_out or args.ladder_trials:
        from checker.grader.ladder import declared

        declared(chapter)  # a chapter without a [ladder]: one line, before any run
    if args.variant is not None and args.submission is not None:  # one script is graded: say which wins
        raise WorkbookError(f"--variant {args.variant} and --submission {args.submission}: give one of them; "
                            "--submission grades the lab file in that folder")
    only = shared.only_checks(args.only)
    _trace_folder(args.keep_traces)
    report = check_and_print(chapter, variant=args.variant or "lab", submission=args.submission,
                              device=args.device, trace_tool=args.trace_tool, with_ncu=args.with_ncu,
                              keep_traces=args.keep_traces, only=only, as_json=args.json)
    if args.ladder or args.ladder_out or args.ladder_trials:
        _ladder(chapter, report.device, args.ladder_out, quiet=args.json, trials=args.ladder_trials)
    elif "ladder" in chapter.raw and not args.json and report.device == "cuda":
        print(f"\nThe reference solution's ladder (each lever's gain, measured here; minutes on a GPU): "
              f"`workbook check {chapter.number:02d} --ladder`.")
    return report.exit_code


def _trace_folder(folder: Path | None) -> None:
    """--keep-traces: make the folder now, so that one that cannot be made is said before minutes of runs, not
    after them."""
    if folder is None:
        return
    if folder.exists() and not folder.is_dir():
        raise WorkbookError(f"--keep-traces {folder}: is a file, not a folder; name a folder for the traces")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WorkbookError(f"--keep-traces {folder}: cannot create it ({err.strerror or err}); "
                            "name another folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise WorkbookError(f"--keep-traces {folder}: not writable by this user; name another folder")


def _ladder(chapter, device: str, out: Path | None, quiet: bool = False, trials: int | None = None) -> None:
    """Measure the chapter's ladder on ``device`` and print its table (checker.grader.ladder); with ``out``, also
    write the measurement (.json) and its table (.md) there. On a device the ladder skips, say why."""
    from checker.grader.ladder import measure, skip_reason
    from checker.pages.ladder import render

    stream = sys.stderr if quiet else sys.stdout  # with --json, stdout holds the report alone
    why = skip_reason(chapter, device)
    if why is not None:
        print(f"\nladder: skipped on {device}: {why}", file=stream)
        return
    result = measure(chapter, device, trials=trials, progress=shared.progress_printer())
    table = render(result)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        out.with_suffix(".md").write_text(table)
    print("\nThe ladder: the slow script, then the reference solution one lever at a time\n\n" + table, file=stream)
