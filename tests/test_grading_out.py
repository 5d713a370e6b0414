"""`workbook grade --out`: a folder of an earlier grading is resumed, never silently replaced by another grading's
gradebook and feedback; an empty --out is refused. The refusals come before anything is graded or written."""

import subprocess
import sys

from checker.grading import ledger
from gradinglib import GOOD, ROOT, grade_env, make_class, read_gradebook, tree_state

CHAPTER = "01_item_syncs"


def grade(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "checker", "grade", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=grade_env(ROOT))


def refused(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


def record(student: str, chapter: str = CHAPTER, device: str = "cpu", trace_tool: str = "torch") -> dict:
    return {"student": student, "chapter": chapter, "device": device, "trace_tool": trace_tool, "assignment": None,
            "submission_sha256": "0" * 64, "verdict": "passed", "reason": "", "wall_s": 1.0, "cells": {},
            "feedback": f"{student}: graded earlier\n"}


def earlier_grading(out, *records):
    """An --out folder as a grading of ``records`` left it: ledger, gradebook.csv, a feedback file each."""
    (out / "feedback").mkdir(parents=True)
    with ledger.locked(out / "ledger.jsonl") as held:
        for r in records:
            held.append(r)
            (out / "feedback" / f"{r['student']}.md").write_text(r["feedback"])
    (out / "gradebook.csv").write_text("student,verdict\n" + "".join(f"{r['student']},passed\n" for r in records))


def test_an_empty_out_is_a_usage_error_and_writes_nothing(tmp_path):
    submissions = make_class(tmp_path / "class", {"ann": GOOD})
    proc = grade(CHAPTER, submissions, "--out", "", "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 2 and "--out" in proc.stderr and "empty path" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["class"]


def test_a_gradebook_without_a_ledger_is_kept(tmp_path):
    submissions = make_class(tmp_path / "class", {"ann": GOOD})
    out = tmp_path / "grades"
    out.mkdir()
    (out / "gradebook.csv").write_text("student,mark\nann,A\n")  # the instructor's own, or a ledger deleted
    line = refused(grade(CHAPTER, submissions, "--out", out, "--device", "cpu"))
    assert f"--out {out}: holds gradebook.csv" in line and "--force" in line and "would be lost" in line
    assert tree_state(out) == {"gradebook.csv": b"student,mark\nann,A\n"}
    (out / "gradebook.csv").write_text("name,score\n")  # no rows, but not a gradebook either
    assert "holds gradebook.csv" in refused(grade(CHAPTER, submissions, "--out", out, "--device", "cpu"))


def test_another_chapters_grading_is_kept_and_force_replaces_it_from_the_ledger(tmp_path):
    submissions = make_class(tmp_path / "class", {"ann": GOOD})
    out = tmp_path / "grades"
    earlier_grading(out, record("ann", chapter="02_pageable_copies"))
    before = tree_state(out)
    line = refused(grade(CHAPTER, submissions, "--out", out, "--device", "cpu", "--collect"))
    assert "of chapter 02_pageable_copies" in line and "--force" in line and "ledger keeps every record" in line
    assert tree_state(out) == before
    other = make_class(tmp_path / "other-class", {"zed": GOOD})  # the same chapter, another class
    line = refused(grade("02", other, "--out", out, "--device", "cpu", "--collect"))
    assert "of other students" in line and tree_state(out) == before

    forced = grade(CHAPTER, submissions, "--out", out, "--device", "cpu", "--collect", "--force")
    assert forced.returncode == 4, forced.stderr  # ann is pending for chapter 01
    assert [r["verdict"] for r in read_gradebook(out / "gradebook.csv")] == ["pending"]
    assert (out / "ledger.jsonl").read_bytes() == before["ledger.jsonl"]  # the earlier records stay


def test_the_same_class_is_resumed_or_graded_again(tmp_path):
    """The same chapter's grading of the same class: resumed, or (another device, trace tool or secret, as
    docs/instructors.md says) graded again in place, the ledger keeping the earlier records."""
    submissions = make_class(tmp_path / "class", {"ann": GOOD, "bob": GOOD})
    out = tmp_path / "grades"
    earlier_grading(out, record("ann"), record("bob", device="cuda", trace_tool="nsys"))
    resumed = grade(CHAPTER, submissions, "--out", out, "--device", "cpu", "--collect")
    assert resumed.returncode == 4, resumed.stderr  # the records are of other hashes: pending
    assert [r["student"] for r in read_gradebook(out / "gradebook.csv")] == ["ann", "bob"]
    assert len(ledger.read_records(out / "ledger.jsonl")) == 2

    stopped = tmp_path / "stopped"  # a run stopped before its first student: pending rows, an empty ledger
    stopped.mkdir()
    (stopped / "ledger.jsonl").write_text("")
    (stopped / "gradebook.csv").write_text("student,verdict,reason\nann,pending,not graded yet\n")
    again = grade(CHAPTER, submissions, "--out", stopped, "--device", "cpu", "--collect")
    assert again.returncode == 4, again.stderr


def test_a_ledger_that_is_a_folder_is_one_line_and_is_kept(tmp_path):
    """Not "grading stopped: Is a directory ...; run the same command again to resume", which cannot work."""
    submissions = make_class(tmp_path / "class", {"ann": GOOD})
    out = tmp_path / "grades"
    (out / "ledger.jsonl").mkdir(parents=True)
    (out / "ledger.jsonl" / "mine.txt").write_text("kept\n")
    before = tree_state(out)
    line = refused(grade(CHAPTER, submissions, "--out", out, "--device", "cpu"))
    assert f"{out / 'ledger.jsonl'}: is a folder, not the grading ledger; move it out of the way" in line
    assert "resume" not in line and tree_state(out) == before
