"""Resuming: a grader killed with SIGKILL mid-class, then run again, gives the gradebook of an uninterrupted
run; an unchanged submission is never graded twice, a changed one is graded again."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from checker.grading import ledger
from checker.grading import processes
from gradinglib import (GOOD, RAISES, WRONG, grade_command, grade_env, make_class, make_tiny_root, read_gradebook,
                        run_grade, verdict_columns)

pytestmark = pytest.mark.slow
CLASS = {"ann": GOOD, "bob": WRONG, "cat": RAISES, "eve": None}


def _task_processes(root) -> list[int]:
    """Grading processes started for this test's stand-in checkout (found by their environment)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()
            environ = open(f"/proc/{entry}/environ", "rb").read()
        except OSError:
            continue
        if b"checker.grading.task" in cmdline and f"WORKBOOK_ROOT={root}".encode() in environ:
            if processes.is_alive(int(entry)):
                found.append(int(entry))
    return found


def _timeless(path) -> str:
    """A feedback file without the seconds grading took and without measured numbers: every run trains under
    a fresh secret, so losses and distances vary a little from run to run; the words and verdicts do not."""
    text = re.sub(r", \d+ s$", "", path.read_text(), flags=re.M)
    return re.sub(r"\d+(?:\.\d+)?", "N", text)


def test_sigkill_mid_class_then_rerun_gives_the_uninterrupted_gradebook(tmp_path):
    root = make_tiny_root(tmp_path)
    submissions = make_class(tmp_path / "class", CLASS)
    whole = run_grade("90", submissions, tmp_path / "whole", "--device", "cpu", root=root)
    assert whole.returncode == 3, whole.stderr  # cat raises, eve handed in nothing: no verdict for them

    out = tmp_path / "killed"
    grader = subprocess.Popen(grade_command("90", submissions, out, "--device", "cpu"), env=grade_env(root),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len(ledger.read_records(out / "ledger.jsonl")) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # well into the second student's grading
    os.kill(grader.pid, signal.SIGKILL)
    grader.wait()
    before = ledger.read_records(out / "ledger.jsonl")
    assert 1 <= len(before) < len(CLASS), "the kill was meant to land mid-class"
    rows = read_gradebook(out / "gradebook.csv")  # whole, never half-written, with who is left to grade
    assert [r["student"] for r in rows] == sorted(CLASS) and sum(r["verdict"] == "pending" for r in rows) >= 1
    processes.wait_gone(_task_processes(root), timeout_s=10)
    assert not _task_processes(root), "a grading process outlived the killed grader"

    again = run_grade("90", submissions, out, "--device", "cpu", root=root)
    assert again.returncode == 3, again.stderr
    assert f"grading {len(CLASS) - len(before)} of {len(CLASS)}" in again.stderr
    assert verdict_columns(out / "gradebook.csv") == verdict_columns(tmp_path / "whole" / "gradebook.csv")
    after = ledger.read_records(out / "ledger.jsonl")
    assert sorted(r["student"] for r in after) == sorted(CLASS), "a student graded twice, or lost"
    for name in CLASS:
        assert _timeless(out / "feedback" / f"{name}.md") == _timeless(tmp_path / "whole" / "feedback" / f"{name}.md")


def test_resume_grades_only_what_changed_and_only_and_force_grade_again(tmp_path):
    root = make_tiny_root(tmp_path)
    submissions = make_class(tmp_path / "class", {"ann": GOOD, "bob": WRONG})
    out = tmp_path / "grades"
    first = run_grade("90", submissions, out, "--device", "cpu", root=root)
    assert first.returncode == 0, first.stderr
    assert [r["verdict"] for r in read_gradebook(out / "gradebook.csv")] == ["passed", "failed"]

    same = run_grade("90", submissions, out, "--device", "cpu", root=root)
    assert "grading 0 of 2" in same.stderr and same.returncode == 0
    assert len(ledger.read_records(out / "ledger.jsonl")) == 2

    (submissions / "bob" / "train.py").write_text(GOOD)  # bob hands in a fix
    fixed = run_grade("90", submissions, out, "--device", "cpu", root=root)
    assert "grading 1 of 2" in fixed.stderr and "bob: passed" in fixed.stderr and "ann" not in fixed.stderr.split("\n", 1)[1]
    assert [r["verdict"] for r in read_gradebook(out / "gradebook.csv")] == ["passed", "passed"]

    only = run_grade("90", submissions, out, "--device", "cpu", "--only", "ann", root=root)
    assert "grading 1 of 2" in only.stderr and "ann: passed" in only.stderr
    everyone = run_grade("90", submissions, out, "--device", "cpu", "--force", "--workers", "2", root=root)
    assert "grading 2 of 2" in everyone.stderr, everyone.stderr
    records = ledger.read_records(out / "ledger.jsonl")
    assert [r["student"] for r in records].count("ann") == 3 and len(records) == 6
    assert len(read_gradebook(out / "gradebook.csv")) == 2  # one row per student, the latest record

    unknown = run_grade("90", submissions, out, "--device", "cpu", "--only", "zed", root=root)
    assert unknown.returncode == 2 and unknown.stderr.strip().count("\n") == 0 and "no such student" in unknown.stderr


def test_an_interrupted_grading_exits_130_and_says_how_to_resume(tmp_path):
    """Ctrl-C mid-class: exit 130 (the shell's code for an interrupt, as docs/instructors.md says), one line saying the
    ledger keeps what was graded, no traceback; the same command then grades the rest."""
    root = make_tiny_root(tmp_path)
    names = ["ann", "bob", "cat"]
    submissions = make_class(tmp_path / "class", {name: GOOD for name in names})
    out = tmp_path / "grades"
    # SIGINT as a terminal delivers it: a test suite started in the background (`cmd &` without job control) has
    # SIGINT ignored, which its children inherit, and Python leaves an inherited SIG_IGN alone
    grader = subprocess.Popen(grade_command("90", submissions, out, "--device", "cpu"), env=grade_env(root),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while len(ledger.read_records(out / "ledger.jsonl")) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(grader.pid, signal.SIGINT)
    _, err = grader.communicate(timeout=120)
    assert grader.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "workbook: grading interrupted: what was graded so far is in the ledger; run the same command again to resume")
    page = (Path(__file__).resolve().parent.parent / "docs" / "instructors.md").read_text()
    assert "| 130 | interrupted" in page
    again = run_grade("90", submissions, out, "--device", "cpu", root=root)
    assert again.returncode == 0, again.stderr
    rows = read_gradebook(out / "gradebook.csv")
    assert [r["verdict"] for r in rows] == ["passed"] * len(names) and all(r["reason"] == "" for r in rows), rows
