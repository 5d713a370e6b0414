"""Chapter 08 without the grader's runs: bad input refused before any run, `--practice` grading the practice jobs,
the CPU rule readable in `workbook report`, and `workbook profile 08`'s CPU hint (issue 42's chapter-08 items)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from checker.base.chapters import get_chapter

CHAPTER = "08_triage"
ROOT = Path(__file__).resolve().parent.parent


def test_an_answer_that_is_not_toml_is_refused_in_one_line_before_any_run(workbook, tmp_path):
    folder = tmp_path / "practice"
    folder.mkdir()
    shutil.copy(ROOT / "labs" / CHAPTER / "train.py", folder / "train.py")
    shutil.copy(ROOT / "labs" / CHAPTER / "assignment.toml", folder / "assignment.toml")
    answer = folder / "answer.toml"
    answer.write_text('device = "cpu"\n[jobs.a]\nwall = data\n')  # a bare word: not TOML
    began = time.monotonic()
    proc = workbook("check", "08", "--submission", str(folder), "--device", "cpu", timeout=120)
    took = time.monotonic() - began
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "not valid TOML" in proc.stderr and str(answer) in proc.stderr
    assert "traced" not in proc.stdout + proc.stderr and "The answer is not filled in yet" not in proc.stderr
    assert took < 60, f"{took:.0f} s: the answer is read before any run"
    assert answer.read_text() == 'device = "cpu"\n[jobs.a]\nwall = data\n'  # nothing the learner had is lost


def test_practice_grading_grades_every_student_against_the_practice_jobs(tmp_path):
    """`workbook grade 08 --practice` grades the public practice jobs (what the instructors' page says), so a
    practice answer handed in as alice is judged on the jobs it was made for; under a course secret each student
    is graded as their folder's name."""
    from checker.grading.grader import Settings, learner_for

    def settings(assignment):
        return Settings(chapter=get_chapter(CHAPTER), submissions=tmp_path, out=tmp_path / "out", device="cpu",
                        trace_tool="torch", student_timeout_s=60.0, max_submission_bytes=1 << 20,
                        workbook_version="test", assignment=assignment)

    assert learner_for(settings("practice"), tmp_path / "alice") == "practice"
    assert learner_for(settings("course:0123456789abcdef"), tmp_path / "alice") == "alice"


def test_the_report_prints_the_host_time_per_op_the_cpu_rule_reads(workbook):
    trace = ROOT / "solutions" / CHAPTER / "profiles" / "cpu-job-b.json.gz"
    proc = workbook("report", str(trace), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ops = next(line for line in proc.stdout.splitlines() if line.startswith("Ops:"))
    assert "us of host time each outside the data wait (median over steps)" in ops, ops


def test_the_cpu_per_op_time_is_the_median_step_so_one_slow_step_does_not_move_it():
    """A step the machine took away from the run (a shared CPU) moved the grader's mean-based value 5x; the median
    over steps holds."""

    import pandas as pd

    from checker.trace import load
    from checker.trace.report import _host_ms_per_op

    trace = load(ROOT / "solutions" / CHAPTER / "profiles" / "cpu-job-b.json.gz")
    wait = trace.get_data_wait()
    steady = _host_ms_per_op(trace, set(), wait)
    slowed = wait.copy()
    slowed.loc[slowed.index[0], "step_ns"] = int(slowed["step_ns"].iloc[0]) * 20  # one step preempted
    assert isinstance(slowed, pd.DataFrame) and _host_ms_per_op(trace, set(), slowed) < 1.5 * steady


def test_profile_08_says_what_to_look_for_on_a_cpu(workbook):
    proc = workbook("profile", "08", "--tool", "torch", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "on a CPU, look for:" in proc.stderr and "host time" in proc.stderr
    assert "torch_cpu" in get_chapter(CHAPTER).look_for


def _fetching(calls: list[str]):
    """A trace of two steps whose fetches run these Python calls, one after another."""
    import pandas as pd

    from checker.trace.analysis import TraceAnalysis
    from checker.trace.events import finish

    rows = []
    for step in (0, 1):
        base = step * 10_000_000
        rows += [{"kind": "range", "name": f"step {step}", "start_ns": base, "end_ns": base + 9_000_000, "pid": 1, "tid": 1},
                 {"kind": "range", "name": "data", "start_ns": base + 10, "end_ns": base + 8_000_000, "pid": 1, "tid": 1}]
        rows += [{"kind": "python", "name": name, "start_ns": base + 100 + 100 * i, "end_ns": base + 150 + 100 * i,
                  "pid": 1, "tid": 1} for i, name in enumerate(calls)]
    return TraceAnalysis(finish(pd.DataFrame(rows)), "kineto", source="hand-made")


def test_a_fetch_runs_the_jobs_data_work_by_function_not_by_count():
    """Chapter 08's data work in a learner's trace is the job's own calls, by function, as the grader's fetch of the
    job makes them: as many calls of other functions (a no-op in a loop) do not stand in (red team 18's
    junk_calls_08), and the same code run from another folder (other file names, other addresses) does."""
    from checker.checks.triage import missing_data_work

    job = ["chapters/08_triage/workload.py(120): round_of_noise", "<built-in method sum of numpy.ndarray object at 0x7f01>",
           "numpy/_core/fromnumeric.py(71): _wrapreduction"] * 1000
    ours = _fetching(job)
    copied = [name.replace("chapters/08_triage/", "/home/me/lab/").replace("0x7f01", "0x5a5a") for name in job]
    assert missing_data_work("mine.json", "b", _fetching(copied), ours, "ships") is None
    junk = job[:200] + ["tools/make_trace.py(25): nothing"] * 3000
    said = missing_data_work("mine.json", "b", _fetching(junk), ours, "ships")
    assert said and "ran 200 of the Python calls the job's fetches run (3000), and 3000 calls of other functions" in said


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), True, "0.3", None])
def test_a_quote_that_is_no_finite_number_fails_both_number_rules(bad):
    """TOML has nan and inf, and every comparison with nan is false: a tolerance written `off > allowed` passed a nan
    quoted for every number (red team 37's nanquote_08). Both rules are fail-closed, and a quote must be finite even
    where the grader measured nothing to hold it to."""
    from checker.checks.triage import read_off, within

    tolerance = {"share": 0.15, "count": 0.15}
    for name, measured in (("data_wait", 0.42), ("ops_per_step", 180.0)):
        assert within(name, bad, measured, tolerance) is not None
        assert within(name, bad, None, tolerance) is not None
        assert within(name, bad, measured, tolerance, hide=True) is not None
        assert within(name, measured, measured, tolerance) is None  # the honest quote passes
        assert read_off(name, measured, measured, tolerance) is None
        assert read_off(name, measured * 3 + 1, measured, tolerance) is not None
        assert read_off(name, float("nan"), measured, tolerance) is None  # within() has already said it
