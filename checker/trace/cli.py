"""`workbook report TRACE [--baseline TRACE] [--steps REGEX] [--skip-steps N] [--json] [--timeline OUT]`.

Reads a torch.profiler trace or an nsys export and prints what it shows, most costly finding first.
Bad input (a file that is not a trace, a cut-off JSON, an .nsys-rep without nsys, ...) gets one line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from checker.trace.errors import TraceError
from checker.trace.steps import DEFAULT_STEP_REGEX


def add_report_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `report` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "report", help="what a trace shows: host syncs, pageable copies, GPU idle time, kernels",
        description="Read a torch.profiler trace (.json, .json.gz, TensorBoard folder) or an nsys export "
                    "(.sqlite, .nsys-rep) and report its steps, host syncs, copies, GPU idle time and kernels.")
    p.add_argument("trace", help="the trace to read")
    p.add_argument("--baseline", metavar="TRACE", help="an earlier trace of the same program, to compare with")
    p.add_argument("--steps", metavar="REGEX", default=None,
                   help=f"pattern of the step ranges' names, group 1 the step number (default {DEFAULT_STEP_REGEX})")
    p.add_argument("--skip-steps", type=int, default=0, metavar="N", help="leave out the first N steps (warm-up)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    p.add_argument("--timeline", metavar="OUT", help="also draw the timeline to OUT.png or OUT.svg")
    p.set_defaults(func=run_report)
    return p


def run_report(args) -> int:
    """Run `workbook report`; returns the exit status (0 ok, 2 bad input)."""
    from checker.trace.analysis import load
    from checker.trace.analyses.diff import summary_diff
    from checker.trace.report import render_text

    try:
        if args.skip_steps < 0:
            raise TraceError("--skip-steps must be 0 or more")
        trace = load(args.trace, step_regex=args.steps, skip_steps=args.skip_steps)
        baseline = load(args.baseline, step_regex=args.steps, skip_steps=args.skip_steps) if args.baseline else None
        summary = trace.summary()
        if args.timeline:
            trace.timeline(args.timeline, baseline=baseline)
    except TraceError as exc:
        print(f"workbook report: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out = dict(summary)
        if baseline is not None:
            out["baseline"] = baseline.summary()
            out["diff"] = trace.get_diff(baseline).to_dict(orient="records")
        print(json.dumps(out, indent=2, default=_json_default))
    else:
        if baseline is not None:
            print(render_text(summary, diff_rows=trace.get_diff(baseline),
                              summary_diff=summary_diff(baseline.summary(), summary)))
        else:
            print(render_text(summary))
        if args.timeline:
            print(f"timeline written to {args.timeline}")
    return 0


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="workbook")
    add_report_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
