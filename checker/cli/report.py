"""`workbook report TRACE [--baseline TRACE] [--steps REGEX] [--skip-steps N] [--log-every N | --chapter ID]
[--json] [--timeline OUT]`.

Reads a torch.profiler trace or an nsys export and prints what it shows, most costly finding first, then
the CPU ops with the most self time. Bad input (a file that is not a trace, a cut-off JSON, an .nsys-rep
without nsys, a FIFO, a timeline path that cannot be written, ...) gets one line on stderr naming the file
and what is wrong, and exit status 2, never a traceback. A damaged trace that can still be read is
reported, with a ``Warning:`` line (and a ``warnings`` entry in --json) for each thing the engine had to
leave out or guess.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from checker.trace.errors import TraceError
from checker.trace.steps import DEFAULT_STEP_REGEX


def add_report_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `report` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "report", help="what a trace shows: host syncs, pageable copies, GPU idle time, kernels, top CPU ops",
        description="Read a torch.profiler trace (.json, .json.gz, TensorBoard folder) or an nsys export "
                    "(.sqlite, .nsys-rep) and report its steps, host syncs, copies, GPU idle time, kernels and "
                    "the CPU ops with the most self time. Logging steps (where reading the loss on the host is "
                    "allowed) are counted like any other unless --log-every or --chapter names them; with either, "
                    "the report counts the steps `workbook check` counts.")
    p.add_argument("trace", help="the trace to read")
    p.add_argument("--baseline", metavar="TRACE", help="an earlier trace of the same program, to compare with")
    p.add_argument("--ranks", nargs="+", metavar="TRACE", default=None,
                   help="the other ranks' traces of the same data-parallel job (the first trace is rank 0): each "
                        "rank's step, all-reduce and wait time side by side, the straggler named when it did more per step; "
                        "with --timeline, a row per rank")
    p.add_argument("--steps", metavar="REGEX", default=None,
                   help=f"pattern of the step ranges' names, group 1 the step number (default {DEFAULT_STEP_REGEX})")
    p.add_argument("--skip-steps", type=int, default=0, metavar="N", help="leave out the first N steps (warm-up)")
    logging = p.add_mutually_exclusive_group()
    logging.add_argument("--log-every", type=int, default=None, metavar="N",
                         help="leave out the logging steps: step s is one when (s + 1) %% N == 0, as "
                              "session.is_log_step(s) says (default: leave none out)")
    logging.add_argument("--chapter", metavar="ID",
                         help="take --log-every from this chapter's chapter.toml (e.g. 04), for the device the "
                              "trace was recorded on: [workload.cuda] for a CUDA trace, [workload.cpu] otherwise")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    p.add_argument("--timeline", metavar="OUT",
                   help="also draw the timeline to OUT.png or OUT.svg (its folder must exist; an earlier picture "
                        "there is replaced, any other file is kept and the report refused)")
    p.set_defaults(func=run_report)
    return p


def run_report(args) -> int:
    """Run `workbook report`; returns the exit status (0 ok, 2 bad input)."""
    try:
        return _report(args)
    except TraceError as exc:
        print(f"workbook report: {exc}", file=sys.stderr)
        return 2
    except (MemoryError, RecursionError) as exc:
        print(f"workbook report: {args.trace}: too large or too deeply nested to analyse here "
              f"({exc.__class__.__name__})", file=sys.stderr)
        return 2


def _report(args) -> int:
    from checker.trace.analysis import load
    from checker.trace.analyses.diff import summary_diff
    from checker.trace.report import render_text

    # an empty path would read the current folder (or, for the others, be dropped without a word)
    for option, value, what in (("the trace path", args.trace, "a trace file"),
                                ("--baseline", args.baseline, "a trace file"),
                                ("--timeline", args.timeline, "a .png or .svg file")):
        if value == "":
            raise TraceError(f"{option} is empty; name {what}")
    if args.skip_steps < 0:
        raise TraceError("--skip-steps must be 0 or more")
    if args.log_every is not None and args.log_every < 1:
        raise TraceError("--log-every must be 1 or more")
    if args.timeline:
        _check_timeline_path(Path(args.timeline), [args.trace, args.baseline, *(getattr(args, "ranks", None) or [])])
    trace = load(args.trace, step_regex=args.steps, skip_steps=args.skip_steps)
    baseline = load(args.baseline, step_regex=args.steps, skip_steps=args.skip_steps) if args.baseline else None
    summary = trace.summary(_log_steps(trace, args))
    base_summary = baseline.summary(_log_steps(baseline, args)) if baseline is not None else None
    ranks = None
    if getattr(args, "ranks", None):
        from checker.trace.ranks import ranks_summary

        others = [load(path, step_regex=args.steps, skip_steps=args.skip_steps) for path in args.ranks]
        ranks = ranks_summary([trace, *others], _log_steps(trace, args))
    if args.timeline and ranks is not None:  # a row per rank
        from checker.trace.timeline import draw_rank_timeline

        draw_rank_timeline([trace, *others], args.timeline, exclude_steps=_log_steps(trace, args))
    elif args.timeline:
        trace.timeline(args.timeline, baseline=baseline)
    if args.json:
        out = dict(summary)
        if ranks is not None:
            out["ranks"] = ranks
        if baseline is not None:
            out["baseline"] = base_summary
            out["diff"] = trace.get_diff(baseline).to_dict(orient="records")
        print(json.dumps(out, indent=2, default=_json_default))
    else:
        if baseline is not None:
            print(render_text(summary, diff_rows=trace.get_diff(baseline),
                              summary_diff=summary_diff(base_summary, summary)))
        else:
            print(render_text(summary))
        if ranks is not None:
            from checker.trace.ranks import render_ranks

            print(render_ranks(ranks))
        if args.timeline:
            print(f"timeline written to {args.timeline}")
    return 0


def _log_steps(trace, args) -> set[int]:
    """The trace's logging steps by --log-every, or by --chapter's log_every for the trace's device."""
    log_every = args.log_every
    if args.chapter:
        from checker.base.chapters import get_chapter
        from checker.base.errors import WorkbookError

        try:
            chapter = get_chapter(args.chapter)
            cfg = chapter.config("cuda" if trace.has_cuda else "cpu")
        except WorkbookError as exc:
            raise TraceError(f"--chapter {args.chapter}: {exc}") from None
        log_every = int(cfg.get("log_every", 0)) or None
    if not log_every:
        return set()
    return {int(s) for s in trace.get_steps()["step"] if (int(s) + 1) % log_every == 0}


def _check_timeline_path(out: Path, inputs=()) -> None:
    """Refuse, before any work, a timeline path whose folder is missing or cannot be written, or whose writing
    would destroy something the user has: the trace or baseline being read (a trace is read by its content, so
    one may well be called .png), the target of a symlink, or an existing file that is not a picture."""
    if out.suffix.lower() not in (".png", ".svg"):
        raise TraceError(f"{out}: the timeline is written as .png or .svg; name the file so")
    if out.is_symlink():
        raise TraceError(f"{out}: is a symlink; name a plain file for the timeline, so that what it points to is kept")
    for source in inputs:
        if source and _same_file(out, Path(source)):
            raise TraceError(f"{out}: is the trace being read ({source}); write the timeline to another file")
    folder = out.parent
    if not folder.is_dir():
        raise TraceError(f"{out}: the folder {folder} does not exist; create it first or write the timeline elsewhere")
    if out.exists() and not out.is_file():
        raise TraceError(f"{out}: exists and is not a file; name a file for the timeline")
    if out.is_file() and not _is_picture(out):
        raise TraceError(f"{out}: exists and is not a {out.suffix.lower()[1:].upper()} picture; "
                         f"move it away or write the timeline elsewhere")
    if not os.access(folder, os.W_OK):
        raise TraceError(f"{out}: the folder {folder} cannot be written to; write the timeline elsewhere")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where they would be
        return a.resolve() == b.resolve()


def _is_picture(path: Path) -> bool:
    """Whether an existing file is an empty file or a picture of the kind its name says: one we may replace."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    if not head:
        return True
    if path.suffix.lower() == ".png":
        return head.startswith(b"\x89PNG\r\n\x1a\n")
    return b"<svg" in head


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    return str(value)
