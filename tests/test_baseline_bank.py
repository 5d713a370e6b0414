"""The slow script's speed shared by a grading worker's students (checker.grader.baseline), and the reference solution
trained beside each student's runs in its place: measured when due, never a secret shared, never trusted
unchecked."""

import pytest

from checker.grader.baseline import BaselineBank
from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from checker.grader.evaluate import Evaluation, evaluate
from checker.grader.pairs import speed_of

CHAPTER = "01_item_syncs"


def test_the_bank_measures_for_the_first_student_then_every_few():
    bank = BaselineBank(every=3)
    assert bank.due(trials=2) == 2 and bank.summary() is None
    bank.add(10.0, 512)
    bank.add(12.0, 512)
    assert bank.due(trials=2) == 0
    for _ in range(2):
        bank.graded_one()
    assert bank.due(trials=2) == 0
    bank.graded_one()
    assert bank.due(trials=2) == 1  # three students since the last measurement: once more, for drift
    bank.add(11.0, 512)
    assert bank.due(trials=2) == 0 and [w["window_s"] for w in bank.recent(2)] == [12.0, 11.0]
    assert "3 runs on this worker: median 11.000 s, 10.000-12.000 s (18.2% spread)" in bank.summary()


def test_the_bank_travels_as_json_and_back():
    bank = BaselineBank(every=4)
    bank.add(3.5, 64)
    bank.reference = {"agrees": True, "distance": 0.0, "problems": [], "why": ""}
    again = BaselineBank.from_json(bank.to_json())
    assert again == bank
    assert BaselineBank.from_json(None) == BaselineBank()


class FakeRun:
    def __init__(self, window_s, samples=512):
        self.window_s, self.samples = window_s, samples


def test_with_a_bank_each_candidate_window_is_held_against_the_latest_baseline_windows():
    bank = BaselineBank()
    for seconds in (30.0, 9.0, 10.0, 11.0):  # the first is old: only the latest `trials` count
        bank.add(seconds, 512)
    chapter = get_chapter(CHAPTER)
    ev = Evaluation(chapter, chapter.solution_script, "cpu", bank=bank)
    assert ev.reference == chapter.solution_script
    pairs = [(FakeRun(4.0), FakeRun(5.0)), (FakeRun(4.0), FakeRun(4.0))]  # (reference, candidate)
    speed = speed_of(pairs, bank)
    assert speed.baseline_windows == (10.0, 11.0) and speed.candidate_windows == (5.0, 4.0) and speed.samples == 512
    assert speed.ratios == pytest.approx([10.5 / 5.0, 10.5 / 4.0])  # the reference's own windows do not count
    assert speed.shared == bank.summary()


def test_without_a_bank_each_pair_is_its_own_comparison():
    chapter = get_chapter(CHAPTER)
    ev = Evaluation(chapter, chapter.solution_script, "cpu")
    assert ev.reference == chapter.slow_script
    speed = speed_of([(FakeRun(10.0), FakeRun(5.0)), (FakeRun(12.0), FakeRun(4.0))], None)
    assert speed.ratios == pytest.approx([2.0, 3.0]) and speed.baseline_windows == (10.0, 12.0) and speed.shared is None


def test_chapters_that_read_the_slow_scripts_trace_keep_a_baseline_per_student():
    chapter = get_chapter("04_eager_microops")
    ev = Evaluation(chapter, chapter.solution_script, "cpu", bank=BaselineBank())
    assert ev.reference == chapter.slow_script
    assert any("compare counts with its trace" in note for note in ev.notes)


@pytest.mark.slow
def test_students_share_the_speed_never_a_secret(pristine_lab):
    """Three students graded with one bank: each candidate run trains under a secret of its own, beside the
    reference solution under that same secret; the slow script ran once for the whole worker; a submission
    that trains half the steps fails same_work against the reference."""
    from pathlib import Path

    chapter = get_chapter(CHAPTER)
    half_steps = Path(__file__).parent / "redteam" / "cheats" / "half_steps" / "train.py"
    bank = BaselineBank()
    seeds, reports = [], []
    lab = pristine_lab(chapter.id) / chapter.lab_file  # the lab as shipped, whatever the learner did to theirs
    for script in (chapter.solution_script, lab, half_steps):
        ev = Evaluation(chapter, script, "cpu", bank=bank)
        try:
            reports.append(ev.run_checks("class"))
            seeds += [run.seed for pair in ev.made.pairs() for run in pair]
            assert all(ref.script == chapter.solution_script for ref, _ in ev.made.pairs())
        finally:
            ev.cleanup()
        bank.graded_one()
    assert bank.runs == 1 and bank.reference["agrees"]  # one slow run, checked against the reference once
    assert len(set(seeds)) == len(seeds) // 2  # a pair shares its secret; no two pairs do
    solution, lab, cheat = reports
    assert solution.passed and not lab.passed
    cheated = next(c for c in cheat.checks if c.name == "same_work")
    assert cheated.status == "failed" and any("reference solution's" in line for line in cheated.evidence), cheated
    same_work = next(c for c in lab.checks if c.name == "same_work")
    assert same_work.status == "passed" and same_work.measured["compared_with"] == "reference solution"
    assert any("work compared with the reference solution" in note for note in solution.notes)


@pytest.mark.slow
def test_a_reference_that_does_less_work_stops_the_grading(monkeypatch, tmp_path, pristine_lab):
    """The reference is trusted because it is checked: one that trains half the steps is refused, by name."""
    from pathlib import Path

    chapter = get_chapter(CHAPTER)
    broken = Path(__file__).parent / "redteam" / "cheats" / "half_steps" / "train.py"
    monkeypatch.setattr(type(chapter), "solution_script", property(lambda self: broken))
    with pytest.raises(WorkbookError, match="does not do the slow script's work") as raised:
        evaluate(chapter, submission=pristine_lab(chapter.id), device="cpu", bank=BaselineBank())
    assert "work differs" in str(raised.value)


@pytest.mark.slow
def test_a_class_of_chapter_03_grades_its_workers_under_the_graders_deep_folders(workbook, tmp_path):
    """DataLoader workers in a graded run: their sockets fit under the grading worker's temporary folders, and
    the reference solution (itself using workers) trains beside the student's run."""
    import csv
    import shutil

    chapter = get_chapter("03_dataloader_workers")
    subs = tmp_path / "subs"
    (subs / "ada").mkdir(parents=True)
    shutil.copy(chapter.solution_script, subs / "ada" / chapter.lab_file)
    proc = workbook("grade", "03", str(subs), "--out", str(tmp_path / "grades"), "--device", "cpu")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / "grades" / "gradebook.csv").open()))
    failed = {name: value for row in rows for name, value in row.items() if str(value).startswith("failed")}
    assert [(row["student"], row["verdict"]) for row in rows] == [("ada", "passed")], failed or rows
