"""`workbook profile`: print (or run) a chapter's profiling recipe; after torch.profiler, what to read next."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import textwrap
from pathlib import Path

from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path, repo_root
from checker.base.tools import find_tool, require_tool
from checker.cli.quiet import call_quieting_noise
from checker.grader.precheck import check_syntax


def cmd_profile(args: argparse.Namespace) -> int:
    chapter = get_chapter(args.chapter)
    if args.tool not in chapter.recipe:
        raise WorkbookError(f"chapter {chapter.id} has no {args.tool} recipe; it has: {', '.join(chapter.recipe)}")
    script = chapter.script_for(args.variant)
    out_dir = chapter.lab_script.parent / "profiles"
    out = out_dir / (f"{args.variant}-{args.tool}" + (f"-job-{args.job}" if args.job else ""))
    # only {script} and {out} are the workbook's: other braces are the tool's own (nsys's %q{RANK})
    command = chapter.recipe[args.tool].replace("{script}", display_path(script)).replace("{out}", display_path(out))
    if args.job:  # a chapter of mystery jobs (08): the job of your assignment to run
        command += f" --job {shlex.quote(args.job)}"
    print(command)
    look_for = chapter.look_for.get(args.tool)
    if look_for and not args.run:
        print(textwrap.fill("look for: " + look_for, 100), file=sys.stderr)
        if args.tool == "torch" and chapter.look_for.get("torch_cpu"):
            print(textwrap.fill("on a CPU, look for: " + chapter.look_for["torch_cpu"], 100), file=sys.stderr)
    if not args.run:
        if args.tool in ("nsys", "ncu") and find_tool(args.tool) is None:  # the command is for a GPU machine
            print(f"note: {args.tool} is not found here; run the command above on a machine with a GPU and "
                  f"{args.tool}, or here: workbook profile {chapter.number:02d} --tool torch --run", file=sys.stderr)
        return 0
    argv = shlex.split(command)
    if argv[0] in ("nsys", "ncu"):
        argv[0] = require_tool(argv[0], otherwise=f"without it: workbook profile {chapter.number:02d} --tool torch --run")
    argv = [sys.executable if a == "python" else a for a in argv]
    check_syntax(script)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WORKBOOK_ROOT=str(repo_root()))
    try:
        code = call_quieting_noise(argv, env, repo_root())
    except OSError as err:  # the profiler is executable, yet not a program this machine runs
        raise WorkbookError(f"could not start {argv[0]} ({err.strerror or err}); point WORKBOOK_{args.tool.upper()} "
                            "or PATH at a working one") from None
    if code == 0:
        made = sorted(p for p in out_dir.glob(f"{out.name}*"))
        print("wrote " + ", ".join(display_path(p) for p in made) if made else "the tool wrote no report")
        if args.tool == "torch":
            after_torch_profile(chapter, out)
    return code


def after_torch_profile(chapter, out: Path) -> None:
    """What to run next on the trace, and what to look for in it on the device it ran on."""
    trace = out.with_name(out.name + ".json.gz")
    if not trace.is_file():
        return
    try:
        device = json.loads(out.with_name(out.name + ".result.json").read_text()).get("device")
    except (OSError, ValueError, AttributeError):
        device = None
    look_for = chapter.look_for.get("torch_cpu" if device == "cpu" else "torch")
    print(f"next: workbook report {display_path(trace)}")
    if look_for:
        where = "on this CPU, " if device == "cpu" else ""
        print(textwrap.fill(f"{where}look for: {look_for}", 100))


# Lines torch.profiler's Kineto writes to stderr that say nothing to a learner: its start/stop markers, and on
# a machine without a usable CUDA driver its probe for GPUs (code 35: cudaErrorInsufficientDriver).
