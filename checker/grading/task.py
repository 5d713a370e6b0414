"""One student's grading, in a process of its own: ``python -m checker.grading.task`` (started by the grader).

It reads a JSON request on stdin, grades the scratch copy of the submission with ``checker.grader.evaluate`` (the only
place in the grading layer that calls it), and writes one JSON result to the pipe the grader handed it (file
descriptor ``WORKBOOK_GRADE_RESULT_FD``, not inherited by the runs it starts). Whatever the runs print stays
in this process or goes to the grader's bounded log reader: the grader itself never holds it.

It dies with the grader (PR_SET_PDEATHSIG), and as a subreaper it adopts the processes a submission leaves
behind; once grading is done it kills them and says how many there were.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from checker.grading import processes


def _gpu_name(device: str) -> str:
    if device != "cuda":
        return ""
    try:
        import torch

        return torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - a name is a nicety; the checks already said whether CUDA works
        return ""


def grade(request: dict) -> dict:
    """Grade one submission; a WorkbookError (a crash, a hang, a missing file) is this student's error."""
    from checker.base.chapters import get_chapter
    from checker.base.errors import WorkbookError
    from checker.grader.baseline import BaselineBank
    from checker.grader.evaluate import evaluate
    from checker.grader.precheck import ScriptSyntaxError
    from checker.grading.gradebook import cell
    from checker.learner.feedback import format_report

    chapter = get_chapter(request["chapter"])
    # the slow script's speed this worker measured for the students before (None: pair every run with it)
    bank = BaselineBank.from_json(request["bank"]) if request.get("bank") is not None else None
    try:
        # the one entry: a submission that does not compile is said in one line (file:line:col: SyntaxError: what),
        # before any run, and chapter 01's train.py handed in as chapter 00's is said, not run
        report = evaluate(chapter, submission=Path(request["submission"]), device=request["device"],
                          trace_tool=request["trace_tool"], bank=bank,
                          learner=request.get("learner") or Path(request["submission"]).name)
    except ScriptSyntaxError as err:
        # the gradebook's reason is the one line; the feedback shows the line and a caret too, as `workbook check`
        return {"kind": "error", "reason": err.headline, "detail": str(err), "bank": _bank_back(bank)}
    except WorkbookError as err:
        return {"kind": "error", "reason": " ".join(str(err).split()), "bank": _bank_back(bank)}
    finally:
        if bank is not None:
            bank.graded_one()
    speedup = next((c.measured.get("speedup") for c in report.checks if c.name == "throughput"), None)
    return {"kind": "report", "verdict": "passed" if report.passed else "failed", "report": report.to_json(),
            "cells": {c.name: cell(c.to_json()) for c in report.checks}, "speedup": speedup,
            "feedback": format_report(report, chapter) + "\n", "failed_checks": [c.name for c in report.checks
                                                                                  if c.status == "failed"],
            "bank": _bank_back(bank)}


def _bank_back(bank) -> dict | None:
    return bank.to_json() if bank is not None else None


def leftovers() -> int:
    """How many processes the student's runs left behind, killed: the grader's own fork server is closed first, so
    that it is not counted (on a GPU every student's feedback said "left 1 process running", the server)."""
    from checker.grader import forkserver

    forkserver.stop()
    return processes.kill_tree(os.getpid())


def pin_cpus() -> None:
    """Keep this grading, and every run it starts, on its worker's CPUs (``WORKBOOK_CPUS``, set where several GPUs
    grade at once: checker.grading.classroom.cpu_shares)."""
    from checker.grading.classroom import CPUS_ENV

    cpus = os.environ.pop(CPUS_ENV, "")
    if cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in cpus.split(",")})


def main() -> int:
    pin_cpus()  # first: the fork server and every run inherit it
    parent = int(os.environ.pop("WORKBOOK_GRADE_PARENT", "0"))
    processes.die_with_parent()
    if parent and os.getppid() != parent:  # the grader died before the line above took effect
        return 1
    processes.become_subreaper()
    result_fd = int(os.environ.pop("WORKBOOK_GRADE_RESULT_FD"))
    os.set_inheritable(result_fd, False)
    request = json.loads(sys.stdin.read())
    result = grade(request)
    result["gpu_name"] = _gpu_name(request["device"])
    result["leftover_processes"] = leftovers()
    with os.fdopen(result_fd, "w", encoding="utf-8") as channel:
        channel.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
