"""`workbook grade`: a class of submissions in one command, a gradebook and a feedback file per student."""

import csv
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "submissions"


@pytest.mark.slow
def test_grade_a_class(workbook, tmp_path, pristine_lab):
    submissions = tmp_path / "class"
    (submissions / "bob").mkdir(parents=True)
    shutil.copy(pristine_lab("01") / "train.py", submissions / "bob" / "train.py")  # the lab as shipped
    shutil.copytree(DATA / "raises", submissions / "carol")
    (submissions / "dave").mkdir()  # handed in nothing
    out = tmp_path / "grades"
    proc = workbook("grade", "01", str(submissions), "--out", str(out), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    rows = {row["student"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    assert rows["bob"]["verdict"] == "failed" and rows["bob"]["host_syncs"] == "failed (3 syncs/step)"
    assert rows["bob"]["same_work"].startswith("passed")
    assert rows["carol"]["verdict"] == "error" and "ValueError: shapes do not match" in rows["carol"]["reason"]
    assert rows["dave"]["verdict"] == "error" and "no train.py" in rows["dave"]["reason"]
    bob = (out / "feedback" / "bob.md").read_text()
    assert "loss.item()" in bob and "hint:" in bob
    assert "could not be graded" in (out / "feedback" / "carol.md").read_text()


def test_grade_needs_a_folder_of_submissions(workbook, tmp_path):
    proc = workbook("grade", "01", str(tmp_path / "missing"), "--out", str(tmp_path / "g"))
    assert proc.returncode == 2 and "not a folder of submissions" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = workbook("grade", "01", str(tmp_path / "empty"), "--out", str(tmp_path / "g"))
    assert proc.returncode == 2 and "holds no submission folders" in proc.stderr
