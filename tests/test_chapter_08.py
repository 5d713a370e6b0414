"""Chapter 08 (triage) on a CPU, as CI sees it: the reference answer passes; a wrong wall, made-up evidence, a
guess, an answer copied from another learner and the unanswered lab fail. The grader's runs are made once
(the practice learner's jobs, then another learner's) and each answer is judged on the same evidence."""

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from checker import checks
from checker.base.chapters import get_chapter
from checker.checks.triage import decide
from checker.grader.assignment import PRACTICE_LEARNER, SECRET_ENV, draw
from checker.grader.pristine import no_shipped_copy, shipped_side_file

pytestmark = pytest.mark.slow

CHAPTER = "08_triage"
ROOT = Path(__file__).resolve().parent.parent


def _evidence(learner=None):
    """The grader's evidence for the reference solution (its answer and fix), for ``learner``'s jobs."""
    from checker.grader.evaluate import Evaluation

    chapter = get_chapter(CHAPTER)
    ev = Evaluation(chapter, chapter.solution_script, "cpu", only={"triage"}, learner=learner)
    try:
        return ev.gather(ev.make_runs())
    finally:
        ev.cleanup()


@pytest.fixture(scope="module")
def practice():
    return _evidence()


def _judge(evidence, answer):
    spec = get_chapter(CHAPTER).check("triage")
    diagnosis = dataclasses.replace(evidence.diagnosis, answer=answer, answer_problem=None)
    return checks.KINDS["triage"](dataclasses.replace(evidence, diagnosis=diagnosis), spec)


def _reference():
    return tomllib.loads((ROOT / "solutions" / CHAPTER / "answer.toml").read_text())


def test_reference_answer_passes_and_the_grader_classifies_by_design(practice):
    result = _judge(practice, _reference())
    assert result.status == "passed", result.evidence
    jobs = result.measured["jobs"]
    for job, m in jobs.items():  # data and overhead decided on a CPU; the kernel job left unconfirmed, said so
        assert m["wall"] == (None if m["design"] == "kernel" else m["design"]), (job, m)
    assert result.measured["unconfirmed"] == [j for j, m in jobs.items() if m["design"] == "kernel"]
    assert any("not confirmed here" in line and "GPU" in line for line in result.evidence)


def test_wrong_wall_fails(practice):
    answer = _reference()
    data = next(j for j, row in answer["jobs"].items() if row["wall"] == "data")
    over = next(j for j, row in answer["jobs"].items() if row["wall"] == "overhead")
    answer["jobs"][data]["wall"], answer["jobs"][over]["wall"] = "overhead", "data"
    result = _judge(practice, answer)
    assert result.status == "failed"
    assert any(f"job {data}: wall = 'overhead', but the grader's measurement decides 'data'" in line
               for line in result.evidence), result.evidence


def test_kernel_claimed_for_a_job_the_cpu_measured_as_data_fails(practice):
    answer = _reference()
    data = next(j for j, row in answer["jobs"].items() if row["wall"] == "data")
    answer["jobs"][data]["wall"] = "kernel"
    assert _judge(practice, answer).status == "failed"


@pytest.mark.parametrize("field,change", [("data_wait", 0.3), ("ops_per_step", 2.0)])
def test_made_up_evidence_fails(practice, field, change):
    answer = _reference()
    for row in answer["jobs"].values():
        row[field] = row[field] + change if field == "data_wait" else row[field] * change
    result = _judge(practice, answer)
    assert result.status == "failed"
    assert sum(f"{field} = " in line and "the grader measured" in line for line in result.evidence) == 3, result.evidence


def test_guessing_fails_every_way(practice):
    """Every assignment of walls to the jobs, with numbers a guesser would write, fails; and with the right
    numbers, every wrong order of walls fails."""
    reference = _reference()
    jobs = list(reference["jobs"])
    for walls in itertools.permutations(("data", "overhead", "kernel")):
        guess = {"device": "cpu", "fix": reference["fix"],
                 "jobs": {j: {"wall": w, "data_wait": 0.5, "ops_per_step": 500} for j, w in zip(jobs, walls)}}
        assert _judge(practice, guess).status == "failed", walls
        ordered = {"device": "cpu", "fix": reference["fix"],
                   "jobs": {j: dict(reference["jobs"][j], wall=w) for j, w in zip(jobs, walls)}}
        right = all(reference["jobs"][j]["wall"] == w for j, w in zip(jobs, walls))
        assert (_judge(practice, ordered).status == "passed") == right, walls


def test_evidence_from_another_device_fails(practice):
    answer = dict(_reference(), device="cuda")
    result = _judge(practice, answer)
    assert result.status == "failed" and any("device = 'cuda'" in line for line in result.evidence)


def test_an_answer_copied_from_another_learner_fails():
    """The practice learner's reference answer, handed in by another learner: the grader draws that learner's
    jobs from its secret, runs them, and the walls and numbers do not fit."""
    chapter = get_chapter(CHAPTER)
    other = "learner-2"
    assert draw(chapter, other).designs != draw(chapter, PRACTICE_LEARNER).designs
    evidence = _evidence(learner=other)
    assert evidence.diagnosis.learner == other
    result = _judge(evidence, _reference())
    assert result.status == "failed"
    text = "\n".join(result.evidence)
    # the practice learner's traces are not this learner's jobs; and no other learner's answers are printed
    assert sum("is not a trace of job" in line for line in result.evidence) == 3, result.evidence
    assert "the grader measured" not in text and "decides '" not in text and "measured data_wait" not in text
    assert "only the practice learner's answers are shown" in text


def test_the_assignment_comes_from_the_secret_not_the_learners_file(monkeypatch):
    chapter = get_chapter(CHAPTER)
    practice = draw(chapter, PRACTICE_LEARNER)
    assert practice.secret_kind == "practice" and sorted(practice.designs.values()) == ["data", "kernel", "overhead"]
    found = shipped_side_file(chapter, "assignment.toml")  # the lab's file as shipped, not the learner's copy
    if found is None:
        pytest.skip(no_shipped_copy(chapter, "assignment.toml"))
    shipped = tomllib.loads(found[0])
    assert shipped["jobs"] == practice.codes  # the shipped lab's jobs are the practice learner's
    monkeypatch.setenv(SECRET_ENV, "a course's secret")
    course = draw(chapter, PRACTICE_LEARNER)
    assert course.secret_kind == "course" and course.codes != practice.codes


def test_rules_on_a_gpu_partition_every_job():
    rules = {"data_wait": 0.4, "gpu_idle": 0.4}
    assert decide({"data_wait": 0.7, "gpu_idle": 0.8}, "cuda", rules)[0] == "data"
    assert decide({"data_wait": 0.1, "gpu_idle": 0.6, "ops_per_step": 900}, "cuda", rules)[0] == "overhead"
    wall, rule = decide({"data_wait": 0.1, "gpu_idle": 0.05, "top_kernel_share": 0.6}, "cuda", rules)
    assert wall == "kernel" and "rule 3" in rule and "60%" in rule


def test_a_gpu_trace_that_gives_no_gpu_idle_time_decides_no_wall_and_passes_no_answer(tmp_path, monkeypatch):
    """On a GPU every job's wall is decided by its trace; a trace whose GPU time stamps are off from the host's
    gives no GPU idle time, and "kernel" (the CPU's unconfirmed answer) is not taken as right there: it fails,
    saying why. (The answer names that same trace as the learner's own, taken as one here.)"""
    from types import SimpleNamespace

    from checker.base.chapters import get_chapter
    from checker.checks import triage as triage_module
    from checker.checks.triage import triage
    from checker.trace import load

    sys.path.insert(0, str(ROOT / "tests" / "trace"))
    from damage_cases import CASES

    skewed = load(next(c for c in CASES if c.id == "kineto-gpu-clock-5s-late").make(tmp_path)[0])
    jobs = {"a": SimpleNamespace(trace=skewed, design="kernel")}
    answer = {"device": "cuda", "fix": {"job": "a"},
              "jobs": {"a": {"wall": "kernel", "data_wait": 0.0, "ops_per_step": 1, "gpu_idle": 0.0,
                             "top_kernel_share": 0.5}}}
    diagnosis = SimpleNamespace(answer=answer, answer_problem=None, jobs=jobs, secret_kind="practice", fix_job="a",
                                learner=None, shown={"a": skewed})
    monkeypatch.setattr(triage_module, "shown_problem", lambda *args: None)
    outcome = triage(SimpleNamespace(device="cuda", diagnosis=diagnosis), get_chapter(CHAPTER).check("triage"))
    assert outcome.status == "failed"
    assert any("decides no wall" in line and "clock skew" in line for line in outcome.evidence), outcome.evidence


def _check(submission_args):
    env = dict(os.environ, WORKBOOK_ROOT=str(ROOT), PYTHONPATH=str(ROOT))
    env.pop(SECRET_ENV, None)
    proc = subprocess.run([sys.executable, "-m", "checker", "check", "08", "--device", "cpu", "--json",
                           *submission_args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None, proc.stderr


def test_a_fix_with_many_workers_does_no_work_after_the_window(tmp_path):
    """The reference fix with six workers (a learner's 8-core machine) on a 2-core one: their prefetch and their exit
    once the steps are over are not work after the window (0.08-0.13 s read so before session 81, 0.1 s allowed)."""
    source = ROOT / "solutions" / CHAPTER / "train.py"
    text = source.read_text()
    assert "num_workers = int(" in text
    (tmp_path / "train.py").write_text(text.replace("num_workers = int(", "num_workers = 6 or int(", 1))
    code, report, err = _check(["--submission", str(tmp_path), "--only", "same_work"])
    assert code == 0, err[-2000:]
    same_work = next(c for c in report["checks"] if c["name"] == "same_work")
    after = same_work["measured"]["after_window_cpu_s"]
    assert after["candidate"] <= after["allowed"], after


def test_unanswered_lab_fails_end_to_end(pristine_lab, tmp_path):
    """The lab as shipped, with its blank answer file: exit 1, triage failed, naming what is missing."""
    folder = pristine_lab(CHAPTER)  # the lab and its answer form as shipped, never the learner's answer
    if not (folder / "answer.toml").is_file():
        pytest.skip(no_shipped_copy(get_chapter(CHAPTER), "answer.toml"))
    code, report, err = _check(["--submission", str(folder), "--only", "triage"])
    assert code == 1, err[-2000:]
    triage = next(c for c in report["checks"] if c["name"] == "triage")
    assert triage["status"] == "failed"
    # each job's first want is a trace of the learner's own; nothing else of a job is compared without one
    assert all(any(line.startswith(f"job {job}: trace = ''") for line in triage["evidence"]) for job in "abc"), \
        triage["evidence"]
    assert not any("grader measured" in line or "decides" in line for line in triage["evidence"]), triage["evidence"]


def test_a_self_check_of_a_course_assignment_runs_its_file_and_keeps_the_answer_hidden(tmp_path, monkeypatch):
    """A learner of a class checks their work without the course secret: the check runs the jobs of their
    course's assignment file (not the practice draw for their id), and its feedback says what is right or wrong
    without the grader's numbers or walls, which would answer the graded run."""
    import shutil

    from checker.grader.evaluate import Evaluation

    chapter = get_chapter(CHAPTER)
    monkeypatch.delenv(SECRET_ENV, raising=False)
    course = draw(chapter, "learner-7", key="a course's secret", kind="course")
    assert course.codes != draw(chapter, "learner-7").codes  # the practice draw for that id differs
    folder = tmp_path / "learner-7"
    folder.mkdir()
    shutil.copy(chapter.solution_script, folder / "train.py")
    (folder / "answer.toml").write_text((ROOT / "solutions" / CHAPTER / "answer.toml").read_text())
    (folder / "assignment.toml").write_text(course.to_toml())
    ev = Evaluation(chapter, folder / "train.py", "cpu", only={"triage"})
    try:
        evidence = ev.gather(ev.make_runs())
    finally:
        ev.cleanup()
    assert ev.drawn.assignment.codes == course.codes and evidence.diagnosis.learner == "learner-7"
    result = _judge(evidence, _reference())  # the practice learner's answer does not fit these jobs
    assert result.status == "failed"
    text = " ".join(result.evidence)
    assert "the grader measured" not in text and "decides '" not in text and "measured data_wait" not in text
    assert "self-check of your course's assignment" in text
    assert all(set(row) == {"right"} for row in result.measured["jobs"].values())


def test_the_answer_for_the_device_checked_wins_over_the_plain_one(tmp_path):
    """A learner who diagnosed on both devices keeps answer.cpu.toml and answer.cuda.toml; the grader reads the one
    for the device it checks on, else answer.toml."""
    from checker.grader.assignment import answer_path

    (tmp_path / "answer.toml").write_text('device = "cpu"\n')
    assert answer_path(tmp_path, "answer.toml", "cuda") == tmp_path / "answer.toml"
    (tmp_path / "answer.cuda.toml").write_text('device = "cuda"\n')
    assert answer_path(tmp_path, "answer.toml", "cuda") == tmp_path / "answer.cuda.toml"
    assert answer_path(tmp_path, "answer.toml", "cpu") == tmp_path / "answer.toml"


def test_the_gpu_reference_answer_names_each_practice_job_as_designed_and_says_where_it_was_measured():
    """solutions/08_triage/answer.cuda.toml was written by diagnose.py on an H100: one job per wall, the fix on the
    data-bound one, and a header naming the GPU it was measured on."""
    text = (ROOT / "solutions" / CHAPTER / "answer.cuda.toml").read_text()
    answer = tomllib.loads(text)
    assert answer["device"] == "cuda" and "# Measured on NVIDIA" in text
    walls = {job: row["wall"] for job, row in answer["jobs"].items()}
    assert sorted(walls.values()) == ["data", "kernel", "overhead"]
    assert walls[answer["fix"]["job"]] == "data"
    for row in answer["jobs"].values():
        assert {"data_wait", "gpu_idle", "ops_per_step", "top_kernel_share"} <= set(row)


def test_a_class_graded_under_the_course_secret_keeps_the_answer_out_of_the_feedback(practice):
    """Class feedback is handed to students who may resubmit: under the course secret it says which jobs are right
    or not, never the grader's numbers or walls; the instructor's record (`measured`) keeps them."""
    answer = _reference()
    data = next(j for j, row in answer["jobs"].items() if row["wall"] == "data")
    over = next(j for j, row in answer["jobs"].items() if row["wall"] == "overhead")
    answer["jobs"][data]["wall"], answer["jobs"][over]["wall"] = "overhead", "data"
    course = dataclasses.replace(practice, diagnosis=dataclasses.replace(practice.diagnosis, secret_kind="course"))
    result = _judge(course, answer)
    assert result.status == "failed"
    text = "\n".join(result.evidence)
    assert "decides 'data'" not in text and "measured data_wait" not in text and "the grader measured" not in text
    assert f"job {data}: not right yet" in text and "graded under your course's secret" in text
    assert result.measured["jobs"][data]["wall"] == "data"  # the instructor's ledger still has it


def test_a_class_of_chapter_08_is_refused_without_the_course_secret_unless_practice_is_asked(workbook, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.delenv(SECRET_ENV, raising=False)
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    proc = workbook("grade", "08", str(tmp_path / "subs"), "--out", str(tmp_path / "grades"), "--device", "cpu")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert SECRET_ENV in proc.stderr and "--practice" in proc.stderr


def test_the_ledger_grades_a_student_again_under_another_secret(monkeypatch):
    """A chapter 08 record is keyed by the secret it was graded under (a digest, not the secret): forgetting the
    secret once, or changing it, never keeps a verdict judged against other jobs."""
    from checker.grader.assignment import fingerprint
    from checker.grading.gradebook import current_record
    from checker.grading.ledger import latest_by_key

    monkeypatch.delenv(SECRET_ENV, raising=False)
    practice_key = fingerprint()
    monkeypatch.setenv(SECRET_ENV, "s3cret-course")
    course_key = fingerprint()
    monkeypatch.setenv(SECRET_ENV, "another-course")
    assert practice_key == "practice" and course_key.startswith("course:") and "s3cret" not in course_key
    assert fingerprint() != course_key
    record = {"student": "alice", "chapter": CHAPTER, "submission_sha256": "abc", "device": "cpu",
              "trace_tool": "torch", "assignment": practice_key}
    latest = latest_by_key([record])
    assert current_record(latest, CHAPTER, "alice", "abc", "cpu", "torch", practice_key) is record
    assert current_record(latest, CHAPTER, "alice", "abc", "cpu", "torch", course_key) is None


def test_an_assignment_file_naming_another_learner_is_said(tmp_path):
    """Class grading grades a folder as the learner it is named after; an assignment.toml handed in that names
    someone else gets a note saying so and what to do."""
    from checker.grader.evaluate import Evaluation

    chapter = get_chapter(CHAPTER)
    folder = tmp_path / "alice_smith_1234"
    folder.mkdir()
    (folder / "train.py").write_text(chapter.solution_script.read_text())
    (folder / "answer.toml").write_text((ROOT / "solutions" / CHAPTER / "answer.toml").read_text())
    (folder / "assignment.toml").write_text('learner = "alice"\nsecret = "practice"\n')
    ev = Evaluation(chapter, folder / "train.py", "cpu", only={"triage"}, learner=folder.name)
    try:
        assert any("names learner 'alice'" in note and "'alice_smith_1234'" in note for note in ev.notes), ev.notes
    finally:
        ev.cleanup()


# ---- a diagnosis shows its work (issue 43): the traces it was read from --------------------------------------------


def test_constants_quoted_without_traces_fail(practice):
    """Per-design numbers that land within the tolerance, with the right walls, but no trace to show for them."""
    answer = _reference()
    for row in answer["jobs"].values():
        del row["trace"]
    result = _judge(dataclasses.replace(practice, diagnosis=dataclasses.replace(practice.diagnosis, shown={})), answer)
    assert result.status == "failed"
    assert sum("no trace named" in line for line in result.evidence) == 3, result.evidence


def test_a_trace_of_another_job_fails(practice):
    shown = dict(practice.diagnosis.shown)
    shown["a"], shown["b"] = shown["b"], shown["a"]
    diagnosis = dataclasses.replace(practice.diagnosis, shown=shown)
    result = _judge(dataclasses.replace(practice, diagnosis=diagnosis), _reference())
    assert result.status == "failed"
    assert any(line.startswith("job a: trace cpu-job-b.json.gz is not a trace of job a") for line in result.evidence)


def test_numbers_not_read_from_the_named_trace_fail(practice):
    """Within the grader's tolerance, yet not what the learner's own trace holds: not read from it."""
    answer = _reference()
    for row in answer["jobs"].values():
        row["data_wait"] = round(row["data_wait"] + 0.05, 3)
    result = _judge(practice, answer)
    assert result.status == "failed"
    assert sum("but the trace you named reads" in line for line in result.evidence) == 3, result.evidence


def test_a_synthetic_trace_fails(practice, tmp_path):
    """A trace written by hand (steps and `data` ranges that give the shares wanted) has no op of the job's shapes."""
    from checker.trace import load

    events = []
    for step in range(6):
        t = step * 1000
        events += [{"ph": "X", "cat": "user_annotation", "name": f"step {step}", "ts": t, "dur": 1000, "pid": 1, "tid": 1},
                   {"ph": "X", "cat": "user_annotation", "name": "data", "ts": t, "dur": 850, "pid": 1, "tid": 1}]
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": t + 860 + i, "dur": 0.5, "pid": 1, "tid": 1}
                   for i in range(100)]
    path = tmp_path / "made.json"
    path.write_text(json.dumps({"traceEvents": events}))
    shown = dict(practice.diagnosis.shown, c=load(path))
    result = _judge(dataclasses.replace(practice, diagnosis=dataclasses.replace(practice.diagnosis, shown=shown)),
                    _reference())
    assert result.status == "failed"
    assert any(line.startswith("job c: trace made.json records no matrix multiply") for line in result.evidence)


def test_the_grader_recognizes_each_practice_trace_as_its_job(practice):
    """The shapes the workload says each job multiplies are the shapes its trace recorded, on the grader's runs and
    on the reference answer's traces alike."""
    from checker.checks.triage import matmuls_of

    for job, run in practice.diagnosis.jobs.items():
        assert run.matmuls and matmuls_of(run.trace) == set(run.matmuls), job
        assert matmuls_of(practice.diagnosis.shown[job]) == set(run.matmuls), job


def test_no_public_function_gives_a_jobs_design():
    """The workload turns a code into sizes only; the design a code was drawn for is the grader's."""
    from checker.base.workloads import load_workload_module

    chapter = get_chapter(CHAPTER)
    workload = load_workload_module(chapter.dir)
    for code in draw(chapter, PRACTICE_LEARNER).codes.values():
        for device in ("cpu", "cuda"):
            assert set(workload.job_settings(code, device)) == {"batch", "tokens", "rounds", "blocks", "width", "hidden"}
    assert not any("design" in name.lower() for name in vars(workload))


def test_a_learner_other_than_practice_sees_no_answers_under_the_practice_secret(practice):
    """The practice secret is public: anyone can draw any learner's jobs from it, so only the practice learner's
    answers (which the reference solution shows anyway) are printed, even for a blank answer."""
    blank = tomllib.loads((ROOT / "labs" / CHAPTER / "answer.toml").read_text())
    other = dataclasses.replace(practice, diagnosis=dataclasses.replace(practice.diagnosis, learner="alice"))
    result = _judge(other, blank)
    text = "\n".join(result.evidence)
    assert result.status == "failed" and "the grader measured" not in text and "-> data" not in text
    assert all(set(row) == {"right"} for row in result.measured["jobs"].values())
    shown = _judge(practice, blank)  # the practice learner's are shown
    assert any("the grader measured" in line for line in shown.evidence)
