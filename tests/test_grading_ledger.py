"""The ledger and what is derived from it, without grading anything: fast."""

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from checker.checks.evidence import Evidence
from checker.grading import ledger
from checker.grading.classroom import plan_slots
from checker.grading.files import write_atomic
from checker.checks.same_work import same_work
from checker.grading.gradebook import Summary, rebuild, row_for, table
from checker.grading.slurm import shares
from checker.grading.submission import copy_submission, submission_hash


def _record(student, sha="h", verdict="passed", **more):
    return dict(dict(student=student, chapter="01_item_syncs", submission_sha256=sha, device="cpu",
                     trace_tool="torch", verdict=verdict, reason="", cells={"same_work": "passed"}, speedup=None,
                     wall_s=1.0, graded_at="t", workbook_version="v", feedback=f"feedback of {student}\n"), **more)


def test_a_line_cut_short_by_a_crash_is_skipped_and_the_next_append_starts_a_fresh_line(tmp_path):
    path = tmp_path / "ledger.jsonl"
    with ledger.locked(path) as led:
        led.append(_record("ann"))
    with path.open("ab") as handle:  # what a kill in the middle of a write leaves
        handle.write(b'{"student": "bob", "verd')
    assert [r["student"] for r in ledger.read_records(path)] == ["ann"]
    with ledger.locked(path) as led:
        led.append(_record("cat"))
    assert [r["student"] for r in ledger.read_records(path)] == ["ann", "cat"]


def _append_many(path, worker, count):
    for i in range(count):
        with ledger.locked(Path(path)) as led:
            led.append(_record(f"w{worker}-{i}", feedback="x" * 5000))


def test_concurrent_writers_never_interleave_lines(tmp_path):
    path = tmp_path / "ledger.jsonl"
    workers = [multiprocessing.Process(target=_append_many, args=(str(path), w, 40)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])
    assert len(ledger.read_records(path)) == 160


def test_the_latest_record_of_a_submission_wins_and_a_changed_submission_is_pending(tmp_path):
    chapter = get_chapter("01")
    records = [_record("ann", verdict="failed"), _record("ann", verdict="passed"), _record("bob", sha="old")]
    rows = rebuild(tmp_path, chapter, {"ann": "h", "bob": "new"}, ledger.latest_by_key(records), "cpu", "torch")
    assert [(r["student"], r["verdict"]) for r in rows] == [("ann", "passed"), ("bob", "pending")]
    assert (tmp_path / "feedback" / "ann.md").read_text() == "feedback of ann\n"
    assert not (tmp_path / "feedback" / "bob.md").exists()
    assert (tmp_path / "gradebook.csv").read_text().splitlines()[0].startswith("student,verdict,same_work,")


def test_exit_code_says_whether_every_submission_got_a_verdict():
    chapter = get_chapter("01")
    passed, failed = row_for(chapter, "a", "h", _record("a")), row_for(chapter, "b", "h", _record("b", verdict="failed"))
    error, pending = row_for(chapter, "c", "h", _record("c", verdict="error")), row_for(chapter, "d", "h", None)
    assert Summary.of([passed, failed]).exit_code == 0
    assert Summary.of([passed, error]).exit_code == 3
    assert Summary.of([passed, error, pending]).exit_code == 4
    assert Summary.of([passed, failed, error, pending]).line == (
        "4 submissions: 1 passed, 1 failed, 1 could not be graded, 1 not graded yet")


class _Run:
    samples = 512


def _judged(relative, worst_tensor, base_loss, cand_loss):
    """What same_work reads of the grader's evidence: one pair of runs, and the referee's verdict on their weights."""
    judged = {"baseline": {"eval_loss": base_loss},
              "candidate": {"eval_loss": cand_loss, "distance": {
                  "relative": relative, "worst_tensor": worst_tensor, "worst_tensor_name": "fc.weight",
                  "counts_differ": []}}}
    return Evidence(chapter=get_chapter("01"), device="cpu", trace_tool="torch", candidate=Path("train.py"), cfg={},
                    traced=(_Run(), _Run()), verdicts={0: judged})


def _same_work_row(relative, worst_tensor, base_loss, cand_loss):
    chapter = get_chapter("01")
    spec = next(c for c in chapter.checks if c.name == "same_work")
    check = same_work(_judged(relative, worst_tensor, base_loss, cand_loss), spec)
    record = _record("ann", verdict=check.status, cells={}, report={"checks": [check.to_json()]})
    return chapter, row_for(chapter, "ann", "h", record)


def test_a_failed_cell_names_the_measure_that_decided_not_one_within_its_tolerance():
    """The issue's submission: weights 0.54 of the reference's training away (tolerance 0.1), a held-out loss 2.1%
    off (inside the 5% tolerance). Its cell used to read `failed (2.1% loss diff)`."""
    chapter, row = _same_work_row(0.54, 0.6, 1.0, 1.021)
    assert row["verdict"] == "failed"
    assert row["same_work"] == "failed (weight distance 0.54 > 0.1)"
    assert "failed (weight distance 0.54 > 0.1)" in table(chapter, [row])
    _, row = _same_work_row(0.05, 0.9, 1.0, 1.0)  # one layer trained differently
    assert row["same_work"] == "failed (one layer's distance 0.90 > 0.25)"
    _, row = _same_work_row(0.05, 0.06, 1.0, 1.2)  # the loss decided: then it is the number shown
    assert row["same_work"] == "failed (20.0% loss diff > 5%)"
    _, row = _same_work_row(0.0, 0.0, 1.0, 1.001)  # a pass still shows the loss difference
    assert row["same_work"] == "passed (0.1% loss diff)"


def test_atomic_write_replaces_the_whole_file(tmp_path):
    target = tmp_path / "gradebook.csv"
    write_atomic(target, "old\n")
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["gradebook.csv"]


def test_the_scratch_copy_holds_regular_files_only_and_hashes_like_the_folder(tmp_path):
    folder = tmp_path / "ann"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "train.py").write_text("print(1)\n")
    (folder / "__pycache__" / "x.pyc").write_bytes(b"junk")
    (folder / "link").symlink_to("/etc/passwd")
    sha = copy_submission(folder, tmp_path / "copy", max_bytes=1 << 20)
    assert sha == submission_hash(folder)
    assert sorted(p.name for p in (tmp_path / "copy").rglob("*")) == ["train.py"]
    (folder / "train.py").write_text("print(2)\n")
    assert submission_hash(folder) != sha


def test_gpus_are_refused_on_the_cpu_with_one_line():
    chapter = get_chapter("01")
    with pytest.raises(WorkbookError, match="--gpus picks GPUs.*--workers N"):
        plan_slots(chapter, "cpu", "0,1", None, [])
    with pytest.raises(WorkbookError, match=r"times its CPU checks \(data_wait\)"):
        plan_slots(get_chapter("03"), "cpu", None, 2, [])
    with pytest.raises(WorkbookError, match=r"times its CPU checks \(triage\)"):  # shares and host ms per op
        plan_slots(get_chapter("08"), "cpu", None, 2, [])
    envs = [s.env for s in plan_slots(chapter, "cuda", None, None, ["A", "B"])]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs] == ["0", "1"]
    assert plan_slots(chapter, "cuda", "1", None, ["A", "B"])[0].env == {"CUDA_VISIBLE_DEVICES": "1"}  # one: unpinned
    with pytest.raises(WorkbookError, match="2 visible GPU"):
        plan_slots(chapter, "cuda", "0,2", None, ["A", "B"])


def test_slurm_shares_cover_every_student_once():
    names = [f"s{i}" for i in range(7)]
    assert shares(names, None) == [[n] for n in names]
    split = shares(names, 3)
    assert len(split) == 3 and sorted(sum(split, [])) == names


def test_gpu_workers_get_disjoint_cpus_that_cover_the_machine(monkeypatch):
    """Two students graded at once on two GPUs of one host must not share CPUs: one's loader workers would slow the
    other's timed window (issue 24)."""
    from checker.grading.classroom import CPUS_ENV, cpu_shares

    assert cpu_shares(list(range(32)), 2) == [list(range(16)), list(range(16, 32))]
    assert cpu_shares(list(range(10)), 3) == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert cpu_shares([0], 2) is None and cpu_shares(list(range(8)), 1) is None
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(32)))
    envs = [s.env for s in plan_slots(get_chapter("01"), "cuda", "0,1", None, ["A", "B"])]
    assert [env[CPUS_ENV] for env in envs] == [",".join(map(str, range(16))), ",".join(map(str, range(16, 32)))]


def test_a_grading_task_pins_itself_and_its_runs_to_its_cpus():
    import subprocess
    import sys

    cpu = sorted(os.sched_getaffinity(0))[-1]
    code = ("import os, subprocess, sys; from checker.grading.task import pin_cpus; pin_cpus(); "
            "print(sorted(os.sched_getaffinity(0)), subprocess.run([sys.executable, '-c', "
            "'import os; print(sorted(os.sched_getaffinity(0)))'], capture_output=True, text=True).stdout.strip(), "
            "os.environ.get('WORKBOOK_CPUS'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, WORKBOOK_CPUS=str(cpu))).stdout.split()
    assert out == [f"[{cpu}]", f"[{cpu}]", "None"]  # pinned, inherited by what it starts, and not passed on
