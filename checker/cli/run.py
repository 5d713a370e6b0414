"""`workbook run`: a chapter's script, run as a learner would, printing samples/s."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from checker.base.chapters import get_chapter, too_few_steps
from checker.base.errors import WorkbookError
from checker.base.paths import repo_root
from checker.cli import shared
from checker.cli.quiet import call_quieting_noise
from checker.grader.precheck import check_syntax


def cmd_run(args: argparse.Namespace) -> int:
    chapter = get_chapter(args.chapter)
    script = chapter.script_for(args.variant)
    check_syntax(script)
    command = [sys.executable, str(script)]
    device = args.device
    if args.steps is not None:
        device = device or ("cuda" if shared.has_cuda() else "cpu")
        # said here: the script's own message offers its --warmup, which `workbook run` does not pass on
        warmup = int(chapter.config(device).get("warmup", 0)) if device in chapter.workload else 0
        if problem := too_few_steps(args.steps, warmup, device):
            raise WorkbookError(problem)
        command += ["--steps", str(args.steps)]
    if args.device:
        command += ["--device", args.device]
    if getattr(args, "job", None):
        command += ["--job", args.job]
    env = dict(os.environ, WORKBOOK_ROOT=str(repo_root()))
    if device == "cpu" or (device is None and not shared.has_cuda()):
        return call_quieting_noise(command, env, None)  # torch's warnings expected on a CPU, explained
    return subprocess.call(command, env=env)
