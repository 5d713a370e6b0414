"""A run a profiler starts (nsys, ncu: the harness's process is the profiler's child, not the run's own process) keeps
its channel checks: the grader finds the harness's process as the one under the run that holds the channel's pipe
when the harness says hello, and holds it to that pipe at the window's close (checker/grader/runs.py). Until
session 72 the close compared the profiler's process with the pipe, and every nsys check failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.base.chapters import get_chapter
from checker.grader.runs import run_script

ROOT = Path(__file__).resolve().parent.parent
STAND_IN = ROOT / "tests" / "data" / "profiler_stand_in.sh"

pytestmark = pytest.mark.slow


def test_a_run_under_a_profiler_that_starts_it_as_a_child_is_believed(tmp_path):
    chapter = get_chapter("00")
    script = ROOT / "solutions" / chapter.id / chapter.lab_file
    result = run_script(chapter, script, "cpu", steps=8, seed=3, workdir=tmp_path,
                        profiler=("ncu", str(STAND_IN), []))
    assert result.trace_file is not None and result.trace_file.name == "profile.ncu-rep"
    assert len(result.step_ms) == 8 - int(chapter.config("cpu")["warmup"]) and result.weights
