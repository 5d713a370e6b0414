"""One way to a verdict: `workbook check`, `pytest chapters/<id>` and class grading (checker.grading.task) all reach
checker.grader.evaluate.evaluate, so they give the same verdict on the same report and refuse the same
submissions with the same words, before anything runs."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from checker.base.chapters import get_chapter
from checker.checks import FAILED, PASSED, CheckResult

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "01_item_syncs"


def via_cli(submission: Path, capsys) -> tuple[bool, str]:
    from checker.cli import main

    code = main(["check", "01", "--submission", str(submission), "--device", "cpu", "--json"])
    captured = capsys.readouterr()
    return code == 0, captured.err.strip()


def via_pytest_plugin(submission: Path, capsys) -> tuple[bool, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = pytest.main([str(ROOT / "chapters" / CHAPTER / "chapter.toml"), "-p", "no:cacheprovider", "-q",
                            "--workbook-device", "cpu", "--workbook-submission", str(submission)])
    capsys.readouterr()
    text = out.getvalue()
    failed = [line for line in text.splitlines() if line.startswith("E ") or "CheckFailed" in line]
    return code == 0, "\n".join(failed) or text


def via_class_grading(submission: Path, capsys) -> tuple[bool, str]:
    from checker.grading.task import grade

    result = grade({"chapter": CHAPTER, "submission": str(submission), "device": "cpu", "trace_tool": "torch",
                    "learner": submission.name})
    capsys.readouterr()
    if result["kind"] == "error":
        return False, result["reason"]
    return result["verdict"] == "passed", ""


CALLERS = {"workbook check": via_cli, "pytest": via_pytest_plugin, "workbook grade": via_class_grading}


def _report(status: str):
    from checker.grader.report import Report

    chapter = get_chapter(CHAPTER)
    checks = [CheckResult(name=spec.name, doc=spec.doc, status=status if spec.name == "host_syncs" else PASSED)
              for spec in chapter.checks]
    return Report(chapter=chapter.id, variant="x", candidate="x", device="cpu", trace_tool="torch", checks=checks,
                  wall_s=0.0)


@pytest.mark.parametrize("status", [PASSED, FAILED])
def test_every_caller_reaches_the_one_entry_and_gives_its_verdict(status, tmp_path, monkeypatch, capsys):
    from checker.grader import evaluate as entry

    submission = tmp_path / "alice"
    submission.mkdir()
    (submission / "train.py").write_text("x = 1\n")
    calls = []

    def the_entry(chapter, **kwargs):
        calls.append(kwargs["submission"])
        return _report(status)

    monkeypatch.setattr(entry, "evaluate", the_entry)
    verdicts = {name: caller(submission, capsys)[0] for name, caller in CALLERS.items()}
    assert verdicts == {name: status == PASSED for name in CALLERS}
    assert [Path(s).name for s in calls] == ["alice"] * len(CALLERS)  # each caller once, through the entry


REFUSED = {
    "a syntax error": ("def broken(:\n", "SyntaxError"),
    "another chapter's workload": ('from checker.lab import start\nsession = start("00_measuring_right")\n',
                                   "starts chapter 00's workload"),
    "a folder with no lab file": (None, "no train.py in it"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_every_caller_refuses_the_same_submissions_with_the_same_words(case, tmp_path, capsys):
    source, words = REFUSED[case]
    submission = tmp_path / "bob"
    submission.mkdir()
    if source is not None:
        (submission / "train.py").write_text(source)
    said = {name: caller(submission, capsys) for name, caller in CALLERS.items()}
    for name, (passed, message) in said.items():
        assert not passed, f"{name} did not refuse {case}"
        assert words in message, f"{name} said {message!r} for {case}"
