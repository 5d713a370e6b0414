"""`workbook grade`: a class of submissions in one command, a gradebook and a feedback file per student."""

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from gradinglib import GOOD, grade_command, grade_env, make_class, make_tiny_root, read_gradebook, run_grade, tree_state

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "submissions"


@pytest.mark.slow
def test_grade_a_real_class_of_chapter_01_with_relative_paths(tmp_path, pristine_lab):
    """Three submissions of chapter 01 on the CPU, as an instructor types it: relative paths, from the class's
    folder. The submissions are graded from copies: their folders are left exactly as they were."""
    submissions = tmp_path / "class"
    (submissions / "bob").mkdir(parents=True)
    shutil.copy(pristine_lab("01") / "train.py", submissions / "bob" / "train.py")  # the lab as shipped
    (submissions / "ann" / "labs" / "01_item_syncs").mkdir(parents=True)  # a folder mirroring the repository
    shutil.copy(ROOT / "solutions" / "01_item_syncs" / "train.py", submissions / "ann" / "labs" / "01_item_syncs")
    shutil.copytree(DATA / "raises", submissions / "carol")
    (submissions / "dave").mkdir()  # handed in nothing
    (submissions / "notes.txt").write_text("a stray file\n")
    before = tree_state(submissions)

    proc = subprocess.run(grade_command("01", "class", "grades", "--device", "cpu"), capture_output=True, text=True,
                          timeout=900, cwd=tmp_path, env=grade_env(ROOT))
    assert proc.returncode == 3, proc.stderr  # carol and dave: no verdict
    assert "4 submissions: 1 passed, 1 failed, 2 could not be graded" in proc.stdout
    assert "ignored 1 entry of class that is not a student folder: notes.txt" in proc.stderr
    out = tmp_path / "grades"
    rows = {row["student"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    assert rows["ann"]["verdict"] == "passed"
    assert rows["bob"]["verdict"] == "failed" and rows["bob"]["host_syncs"] == "failed (3 syncs/step)"
    assert rows["bob"]["same_work"].startswith("passed")
    assert rows["carol"]["verdict"] == "error" and "ValueError: shapes do not match" in rows["carol"]["reason"]
    assert rows["dave"]["verdict"] == "error" and "no train.py" in rows["dave"]["reason"]
    for row in rows.values():
        assert row["device"] == "cpu" and float(row["wall_s"]) > 0 and row["graded_at"] and row["workbook_version"]
        assert len(row["submission_sha256"]) == 64
    bob = (out / "feedback" / "bob.md").read_text()
    assert "loss.item()" in bob and "hint:" in bob and "bob/train.py" in bob and "/tmp" not in bob
    assert "could not be graded" in (out / "feedback" / "carol.md").read_text()
    assert tree_state(submissions) == before and not list(submissions.rglob("__pycache__"))

    again = subprocess.run(grade_command("01", "class", "grades", "--device", "cpu"), capture_output=True,
                           text=True, timeout=300, cwd=tmp_path, env=grade_env(ROOT))
    assert "grading 0 of 4" in again.stderr and again.returncode == 3
    assert [r["graded_at"] for r in csv.DictReader((out / "gradebook.csv").open())] == [
        rows[name]["graded_at"] for name in sorted(rows)]


def test_a_submission_that_does_not_compile_is_one_clean_line(tmp_path):
    """The reason says where and what as the compiler does, once: not `dave/train.py failed at dave/train.py:38:28:
    SyntaxError: unmatched ']' (train.py, line 38)`, what a run of it used to report (grading now compiles it first)."""
    root = make_tiny_root(tmp_path)
    broken = "\n" * 37 + "weights = [[0.1, 0.2], [0.3, 0.4]]]\n" + GOOD
    submissions = make_class(tmp_path / "class", {"dave": broken})
    proc = run_grade("90", submissions, tmp_path / "grades", "--device", "cpu", root=root, timeout=300)
    assert proc.returncode == 3, proc.stderr
    (row,) = read_gradebook(tmp_path / "grades" / "gradebook.csv")
    assert row["verdict"] == "error" and row["reason"] == "dave/train.py:38:35: SyntaxError: unmatched ']'", row
    feedback = (tmp_path / "grades" / "feedback" / "dave.md").read_text()
    assert "could not be graded: dave/train.py:38:35: SyntaxError: unmatched ']'\n" in feedback
    # the feedback, as `workbook check` would, also shows the line and a caret under the fault
    assert "weights = [[0.1, 0.2], [0.3, 0.4]]]" in feedback and "^" in feedback


def test_grade_needs_a_folder_of_submissions(workbook, tmp_path):
    proc = workbook("grade", "01", str(tmp_path / "missing"), "--out", str(tmp_path / "g"))
    assert proc.returncode == 2 and "not a folder of submissions" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = workbook("grade", "01", str(tmp_path / "empty"), "--out", str(tmp_path / "g"))
    assert proc.returncode == 2 and "holds no submission folders" in proc.stderr
    (tmp_path / "class" / "ann").mkdir(parents=True)
    proc = workbook("grade", "01", str(tmp_path / "class"), "--out", str(tmp_path / "class" / "grades"))
    assert proc.returncode == 2 and "inside the submissions folder" in proc.stderr
    proc = workbook("grade", "01", str(tmp_path / "class"), "--out", str(tmp_path / "g"), "--device", "cpu",
                    "--gpus", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--workers N" in proc.stderr


def test_a_student_folder_named_with_a_newline_is_graded_and_printed_on_one_line(tmp_path):
    """A folder may be called anything: the progress lines and the table show such a name escaped ('bo\\nb'), one
    line per student; the gradebook and the feedback file keep the name itself, and the class's grading goes on."""
    root = make_tiny_root(tmp_path)
    submissions = make_class(tmp_path / "class", {"ann": GOOD, "bo\nb": GOOD})
    proc = run_grade("90", submissions, tmp_path / "grades", "--device", "cpu", root=root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "[2/2] 'bo\\nb': passed" in proc.stderr
    table = proc.stdout.split("\n\n")[0].splitlines()
    assert len(table) == 3 and table[2].startswith("'bo\\nb'  ") and "passed" in table[2]
    assert "identical submissions (the same files): ann, 'bo\\nb'" in proc.stdout
    assert [row["student"] for row in read_gradebook(tmp_path / "grades" / "gradebook.csv")] == ["ann", "bo\nb"]
    assert (tmp_path / "grades" / "feedback" / "bo\nb.md").is_file()


def test_a_class_graded_with_practice_is_not_told_to_set_the_course_secret(monkeypatch, tmp_path):
    """`workbook grade 08 --practice` chose the practice jobs: no student's feedback asks for WORKBOOK_COURSE_SECRET, and the
    gradebook's reason column of a graded student holds none of the report's notes for everyone (the assignment's)."""
    from checker.base.chapters import get_chapter
    from checker.grader.assignment import SECRET_ENV
    from checker.grader.evaluate import Evaluation
    from checker.grading.grader import REPORT_ONLY_NOTES

    monkeypatch.delenv(SECRET_ENV, raising=False)
    chapter = get_chapter("08")
    handed_in = tmp_path / "bob" / "train.py"  # a student's folder holding the lab file alone
    handed_in.parent.mkdir()
    shutil.copy(chapter.solution_script, handed_in)
    for learner, told in (("bob", False), (None, True)):  # class grading; a learner's own check
        ev = Evaluation(chapter, handed_in, "cpu", only={"triage"}, learner=learner)
        try:
            notes = ev.notes
        finally:
            ev.cleanup()
        assert any(n.startswith("assignment:") for n in notes)
        assert any(SECRET_ENV in n for n in notes) == told, notes
        assert not [n for n in notes if not n.startswith(REPORT_ONLY_NOTES)], notes
