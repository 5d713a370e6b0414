"""The learner's loop without a GPU or a long run: syntax errors before anything runs, help on every option,
progress in `workbook list`, hints in steps, the solution behind a pass, a watch that follows saves."""

import argparse
import dataclasses
import json
import re
import threading
import time
from types import SimpleNamespace

import pytest

from checker.learner import progress
from checker.base.chapters import HINT_LEVELS, all_chapters, get_chapter
from checker import checks
from checker.checks import CheckResult


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A progress file of this test's own."""
    monkeypatch.setenv("WORKBOOK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state" / "progress.json"


def _report(chapter_id, device="cpu", **statuses):
    chapter = get_chapter(chapter_id)
    checks = []
    for spec in chapter.checks:
        status = statuses.get(spec.name, "skipped" if spec.skip_reason_for(device) else "passed")
        checks.append(CheckResult(
            name=spec.name, doc=spec.doc, status=status,
            evidence=["1 per step: aten::_local_scalar_dense from train.py:31 `running_loss += loss.item()`"]
            if status == "failed" else [],
            reason=spec.skip_reason_for(device) if status == "skipped" else None,
            measured={"speedup": 2.0} if spec.name == "throughput" and status == "passed" else {}))
    return SimpleNamespace(chapter=chapter.id, device=device, checks=checks, candidate=str(chapter.lab_script),
                           variant="lab", trace_tool="torch", wall_s=1.0,
                           passed=all(c.status != "failed" for c in checks))


# -- errors -----------------------------------------------------------------------------------------------
def test_a_syntax_error_is_found_before_anything_runs(workbook, tmp_path):
    (tmp_path / "train.py").write_text("import torch\n\nfor step in range(3):\n    loss = (step +\n    print(step)\n")
    started = time.perf_counter()
    proc = workbook("check", "01", "--submission", str(tmp_path), "--device", "cpu")
    took = time.perf_counter() - started
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "<frozen" not in proc.stderr
    first, line, caret, advice = proc.stderr.strip().splitlines()
    assert first.startswith(f"workbook: {tmp_path / 'train.py'}:4:12: SyntaxError: "), first
    assert line == "        loss = (step +" and caret == "               ^", (line, caret)
    assert "nothing was run" in advice
    assert took < 5, f"the syntax check took {took:.1f} s; it must come before any run"  # ~1 s here; CI is busy


def test_indentation_errors_and_null_bytes_are_reported_too(tmp_path):
    from checker.grader.precheck import ScriptSyntaxError, check_syntax

    script = tmp_path / "train.py"
    script.write_text("if True:\n\tx = 1\n        y = 2\n")
    with pytest.raises(ScriptSyntaxError, match=r"train.py:3:\d+: (IndentationError|TabError)"):
        check_syntax(script)
    script.write_bytes(b"x = 1\x00\n")
    with pytest.raises(ScriptSyntaxError, match="null bytes|cannot be compiled"):
        check_syntax(script)


def test_every_option_has_help_text():
    from checker.cli.parser import build_parser

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "workbook")
    assert not missing, f"add help= to: {', '.join(missing)}"


def test_kinetos_no_gpu_noise_is_explained_once(tmp_path, monkeypatch, capsys):
    from checker.cli import quiet as cli

    noisy = tmp_path / "noisy.py"
    noisy.write_text(
        "import sys\n"
        "sys.stderr.write('USDT:2026-11-23 00:44:51 9365:9365 SyncActivityProfilerHandler.cpp:39] profiler_start\\n')\n"
        "sys.stderr.write('ERROR:2026-11-23 00:44:53 9365:9365 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\\n')\n"
        "sys.stderr.write('ERROR:2026-11-23 00:44:53 9365:9365 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\\n')\n"
        "sys.stderr.write('a real warning\\n')\n")
    import sys

    assert cli.call_quieting_noise([sys.executable, str(noisy)], {}, None) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("note: torch.profiler looked for CUDA GPUs and found none") and "code 35" in err[0]
    assert err[1:] == ["a real warning"]


def test_the_pin_memory_warning_of_a_cpu_run_is_explained_once(tmp_path, capsys):
    """On a machine without a GPU, torch warns at each DataLoader iterator that pin_memory=True finds no accelerator,
    right after chapter 03's TODO asked for it: `workbook run` says once that it is expected there."""
    import os
    import sys

    import torch

    from checker.cli import quiet as cli

    if torch.accelerator.is_available():
        pytest.skip("torch warns about pin_memory only where no accelerator is found")
    script = tmp_path / "pins.py"
    script.write_text(
        "import sys, warnings\n"
        "from torch.utils.data import DataLoader\n"
        "warnings.simplefilter('always')\n"
        "loader = DataLoader(list(range(4)), batch_size=2, pin_memory=True)\n"
        "for epoch in range(2):\n"
        "    for batch in loader:\n"
        "        pass\n"
        "sys.stderr.write('a real warning\\n')\n")
    assert cli.call_quieting_noise([sys.executable, str(script)], dict(os.environ), None) == 0
    assert capsys.readouterr().err.splitlines() == [cli.PIN_MEMORY_NOTE, "a real warning"]


def test_workbook_run_explains_torchs_cpu_warnings_and_leaves_a_gpu_run_as_it_was(monkeypatch):
    from checker.cli import run, shared

    calls = []
    monkeypatch.setattr(run, "call_quieting_noise", lambda argv, env, cwd: calls.append(("explained", argv)) or 0)
    monkeypatch.setattr(run.subprocess, "call", lambda argv, env: calls.append(("as is", argv)) or 0)
    monkeypatch.setattr(shared, "has_cuda", lambda: False)
    for device in ("cpu", None, "cuda"):
        assert run.cmd_run(argparse.Namespace(chapter="03", variant="lab", steps=200, device=device)) == 0
    monkeypatch.setattr(shared, "has_cuda", lambda: True)
    assert run.cmd_run(argparse.Namespace(chapter="03", variant="lab", steps=200, device=None)) == 0
    assert [how for how, _ in calls] == ["explained", "explained", "as is", "as is"]
    assert calls[0][1][-4:] == ["--steps", "200", "--device", "cpu"]


# -- progress ---------------------------------------------------------------------------------------------
def test_list_shows_not_started_failing_and_passed(state, workbook):
    progress.record_check(_report("01", host_syncs="failed"))
    progress.record_check(_report("02"))
    rows = {row["id"]: row["progress"] for row in json.loads(workbook("list", "--json").stdout)}
    assert rows["01_item_syncs"].startswith("failing: host_syncs (on cpu, ")
    assert rows["02_pageable_copies"].startswith("passed (CPU") and "no speedup measured on cpu" in rows["02_pageable_copies"]
    assert rows["03_dataloader_workers"] == "not started"
    text = workbook("list").stdout
    assert "failing: host_syncs" in text and "not started" in text
    assert json.loads(state.read_text())["chapters"]["01_item_syncs"]["evidence"]["host_syncs"]


def test_a_pass_names_a_speedup_only_where_the_chapter_measures_one(state):
    progress.record_check(_report("00"))  # chapter 00 grades how a script times itself: no throughput check
    progress.record_check(_report("01"))  # on a CPU the speedup check is skipped
    progress.record_check(_report("04", device="cuda"))  # on a GPU chapter 04 measures one (2.0x in _report)
    progress.record_check(_report("04"))  # on a CPU it does not: the same code's speed moves too much there
    # a CPU pass says which checks it could not run (the speedup aside: said on its own)
    assert re.fullmatch(r"passed \(CPU[^,]*, \d{4}-\d\d-\d\d\)", progress.describe("00_measuring_right"))
    assert progress.describe("01_item_syncs").endswith(", no speedup measured on cpu), partial: gpu_fed run only on a GPU")
    passes = progress.describe("04_eager_microops").removeprefix("passed (").removesuffix(")").split("; ")
    assert sorted(p.split(", ")[-1] for p in passes) == ["2.00x", "no speedup measured on cpu"], passes


def _lab_changed_since_the_record(state, chapter_id):
    """What an edit of the lab after its check leaves: a recorded hash that is not the lab's content's now."""
    saved = json.loads(state.read_text())
    saved["chapters"][chapter_id]["lab_sha256"] = "0" * 64
    state.write_text(json.dumps(saved))


def test_a_verdict_belongs_to_the_lab_as_it_was_checked(state, workbook):
    """After a pass, an edited lab (one that no longer compiles, say) is not shown as passed without a word."""
    import hashlib

    progress.record_check(_report("01"))
    progress.record_check(_report("02", host_syncs="failed"))
    lab = get_chapter("01").lab_script
    assert json.loads(state.read_text())["chapters"]["01_item_syncs"]["lab_sha256"] == \
        hashlib.sha256(lab.read_bytes()).hexdigest()
    rows = {row["id"]: row["progress"] for row in json.loads(workbook("list", "--json").stdout)}
    assert rows["01_item_syncs"].startswith("passed (") and "changed" not in rows["01_item_syncs"]
    assert "no hint needed" in workbook("hint", "01").stdout
    _lab_changed_since_the_record(state, "01_item_syncs")
    _lab_changed_since_the_record(state, "02_pageable_copies")
    rows = {row["id"]: row["progress"] for row in json.loads(workbook("list", "--json").stdout)}
    assert rows["01_item_syncs"].startswith("passed (") and rows["01_item_syncs"].endswith(
        ", but your lab changed since: check again"), rows["01_item_syncs"]
    assert rows["02_pageable_copies"].startswith("failing: host_syncs") and "changed since" in rows["02_pageable_copies"]
    assert "but your lab changed since: check again" in workbook("list").stdout
    hint = workbook("hint", "01")
    assert hint.returncode == 0 and "no hint needed" not in hint.stdout
    assert "labs/01_item_syncs/train.py changed since: run `workbook check 01` again" in " ".join(hint.stdout.split())
    hint = " ".join(workbook("hint", "02").stdout.split())
    assert "labs/02_pageable_copies/train.py changed since that check" in hint and "1/3 a nudge:" in hint


def test_a_pass_of_some_checks_is_not_called_a_pass_of_the_lab(state, workbook):
    """After `workbook check 01 --only same_work` passed, the lab may still fail its other checks: the hint sends
    the learner to a full check, not to the solution (a learner was told "no hint needed" with three syncs left)."""
    progress.record_check(_report("01"))
    progress.update("01_item_syncs", every_check=False)
    hint = " ".join(workbook("hint", "01").stdout.split())
    assert "no hint needed" not in hint and "workbook solution" not in hint
    assert "ran only some of the chapter's checks (--only)" in hint and "run `workbook check 01`" in hint


def test_a_check_of_a_variant_or_a_submission_is_not_progress(state, workbook, tmp_path):
    (tmp_path / "train.py").write_text("x = (\n")
    workbook("check", "01", "--submission", str(tmp_path))
    assert not state.exists()


# -- hints ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chapter", all_chapters(), ids=lambda c: c.id)
def test_every_hint_has_three_steps(chapter):
    for hint in chapter.hints:
        assert [label for label, text in hint.steps if len(text) > 20] == [label for _, label in HINT_LEVELS], hint


def test_hint_climbs_the_ladder_of_the_failing_checks_evidence(state, workbook):
    assert "no check of labs/01_item_syncs/train.py recorded yet" in workbook("hint", "01").stdout
    progress.record_check(_report("01", host_syncs="failed"))
    ladder = get_chapter("01").hint_ladder_for("host_syncs", ["aten::_local_scalar_dense from train.py:31"])
    outputs = [workbook("hint", "01").stdout for _ in range(4)]
    assert "1/3 a nudge:" in outputs[0] and "2/3" not in outputs[0]
    assert "2/3 where to look:" in outputs[1] and "3/3" not in outputs[1]
    assert "3/3 the pattern:" in outputs[2] and "last step" in outputs[2]
    assert outputs[3] == outputs[2]
    assert ladder.pattern.split()[0] in " ".join(outputs[2].split())
    progress.record_check(_report("01", same_work="failed"))  # a different failure starts again
    assert "1/3 a nudge:" in workbook("hint", "01").stdout and "2/3" not in workbook("hint", "01").stdout.split("same_work")[0]


def test_a_failed_check_shows_the_nudge_and_points_at_workbook_hint():
    from checker.learner.feedback import format_report

    chapter = get_chapter("01")
    report = _report("01", host_syncs="failed")
    for c in report.checks:
        if c.status == "failed":
            c.hint = chapter.hint_for(c.name, c.evidence)
    text = format_report(report, chapter, learner=True)
    assert "hint: Something in every step needs" in text and "`workbook hint 01` for the next step" in " ".join(text.split())


# -- a pass with skipped checks ---------------------------------------------------------------------------
def test_a_cpu_pass_names_what_went_unverified_and_where():
    from checker.learner.feedback import format_report

    chapter = get_chapter("02")
    shown = format_report(_report("02"), chapter, learner=True)
    assert shown.splitlines()[-1] == "PASSED on cpu, but not every part of the lesson was verified here (listed above)"
    text = " ".join(shown.split())
    assert "Not verified on cpu:" in text
    for name in ("pageable_copies", "batch_copies", "throughput"):  # (host_syncs counts reads on a CPU too)
        assert f"- {name} (" in text and chapter.checks[[s.name for s in chapter.checks].index(name)].skip["cpu"] in text
    assert "Verify it on a machine with an NVIDIA GPU: `workbook check 02 --device cuda`" in text


def test_a_pass_of_every_check_says_so():
    from checker.learner.feedback import format_report

    text = format_report(_report("01", device="cuda"), get_chapter("01"))
    assert text.splitlines()[-1] == "PASSED: every check of the chapter ran and passed"


# -- the solution -----------------------------------------------------------------------------------------
def test_solution_opens_only_after_a_pass_here(state, workbook):
    proc = workbook("solution", "01")
    assert proc.returncode == 1 and "opens once your lab passes on this machine" in proc.stderr
    assert proc.stderr.count("\n") == 1 and not proc.stdout
    forced = workbook("solution", "01", "--force")
    assert forced.returncode == 0 and forced.stderr.startswith("--force: showing the reference solution")
    # a diff against the learner's lab, whatever it holds (a learner who copied the solution gets no diff)
    assert forced.stdout.startswith("--- labs/01_item_syncs/train.py (yours)\n+++ solutions/01_item_syncs/train.py\n") \
        or forced.stdout == "labs/01_item_syncs/train.py is the reference solution, line for line.\n", forced.stdout
    progress.record_check(_report("01"))
    unlocked = workbook("solution", "01")
    assert unlocked.returncode == 0 and not unlocked.stderr and unlocked.stdout == forced.stdout


def test_a_pass_on_another_machine_does_not_open_it(state, workbook, monkeypatch):
    monkeypatch.setattr(progress, "machine", lambda: "another-machine")
    progress.record_check(_report("01"))
    monkeypatch.undo()
    assert workbook("solution", "01").returncode == 1


# -- watch ------------------------------------------------------------------------------------------------
def test_watch_checks_again_on_each_save_and_stops_at_a_pass(tmp_path, monkeypatch):
    from checker.learner import watch

    lab = tmp_path / "labs" / "01_item_syncs" / "train.py"
    lab.parent.mkdir(parents=True)
    lab.write_text("broken = True\n")
    fake = SimpleNamespace(id="01_item_syncs", title="t", number=1, lab_script=lab)
    monkeypatch.setattr(watch, "get_chapter", lambda key: fake)
    monkeypatch.setattr(watch, "_next_after", lambda chapter: None)
    seen = []

    def check_once(chapter):
        seen.append(chapter.lab_script.read_text())
        return "fixed" in seen[-1]

    def save_later():
        time.sleep(1.5)
        (lab.parent / "notes.txt").write_text("not the lab")  # other files do not trigger a check
        time.sleep(0.5)
        lab.write_text("fixed = True\n")

    saver = threading.Thread(target=save_later)
    saver.start()
    lines = []
    code = watch.watch_labs("01", check_once, say=lines.append)
    saver.join()
    assert code == 0 and seen == ["broken = True\n", "fixed = True\n"]
    assert any("saved" in line for line in lines) and "every chapter" in lines[-1]
    assert lab.read_text() == "fixed = True\n"  # the watch never writes the lab


def test_a_hint_agrees_with_the_other_checks_evidence():
    """Chapter 01 on a GPU, the unmodified lab: throughput and host_syncs both fail. throughput's hint says "the
    syncs are gone", so it is not given beside a failed host_syncs; `workbook hint` starts with host_syncs."""
    from checker.checks import FAILED, PASSED, result
    from checker.checks.judge import judge
    from checker.grader.plan import Plan

    chapter = get_chapter("01")
    assert chapter.first_to_fix({"throughput", "host_syncs", "gpu_fed"}) == "host_syncs"
    assert chapter.first_to_fix({"throughput"}) == "throughput"
    outcomes = {"same_work": PASSED, "throughput": FAILED, "host_syncs": FAILED, "gpu_fed": FAILED}
    evidence = SimpleNamespace()  # the checks are stood in for: judge's hints are what is tested

    def stand_in(name):
        return lambda ev, spec: result(spec, outcomes[name], evidence=[f"{name} evidence"])

    original = {name: checks.KINDS[name] for name in outcomes}
    try:
        for name in outcomes:
            checks.KINDS[name] = dataclasses.replace(original[name], function=stand_in(name))
        results = {r.name: r for r in judge(chapter, Plan(selected=tuple(outcomes)).skipped, evidence, None, "cuda")}
    finally:
        checks.KINDS.update(original)
    assert "syncs are gone" not in results["throughput"].hint and "host_syncs" in results["throughput"].hint
    assert results["host_syncs"].hint == chapter.hint_for("host_syncs", ["host_syncs evidence"])
    outcomes["host_syncs"] = PASSED
    assert "syncs are gone" in chapter.hint_for("throughput", ["short"], failed=set())
