"""The `workbook` command as a user meets it: its JSON contracts, its exit codes, its one-line errors."""

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "submissions"
ROOT = Path(__file__).resolve().parents[1]


def one_clear_line(proc):
    """Exit 2, one line on stderr naming the problem, no traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_list_json_names_chapter_01(workbook):
    proc = workbook("list", "--json")
    assert proc.returncode == 0
    rows = json.loads(proc.stdout)
    assert [row["id"][:2] for row in rows] == sorted(row["id"][:2] for row in rows) and rows[0]["id"] == "00_measuring_right"
    first = next(row for row in rows if row["id"] == "01_item_syncs")
    assert first["lab"] == "labs/01_item_syncs/train.py"
    assert "host_syncs" in first["devices"]["cpu"] and "throughput" not in first["devices"]["cpu"]


def test_unknown_chapter(workbook):
    line = one_clear_line(workbook("check", "42"))
    assert "unknown chapter '42'" in line and "01_item_syncs" in line


def test_submission_without_the_lab_file(workbook):
    line = one_clear_line(workbook("check", "01", "--submission", str(DATA / "no_lab"), "--device", "cpu"))
    assert "no train.py" in line


def test_submission_folder_that_does_not_exist(workbook, tmp_path):
    line = one_clear_line(workbook("check", "01", "--submission", str(tmp_path / "nope"), "--device", "cpu"))
    assert "does not exist" in line and str(tmp_path / "nope") in line


def test_another_chapters_lab_is_named_before_anything_runs(workbook, tmp_path, pristine_lab):
    """Every chapter's lab is train.py: chapter 01's handed in as chapter 00's is said in one line, not run."""
    (tmp_path / "train.py").write_text((pristine_lab("01") / "train.py").read_text())
    line = one_clear_line(workbook("check", "00", "--submission", str(tmp_path), "--device", "cpu"))
    assert "chapter 01's lab" in line and "workbook check 01" in line


def test_check_chapter_reads_only_a_literal_chapter_id(tmp_path):
    from checker.base.errors import WorkbookError
    from checker.grader.precheck import check_chapter

    script = tmp_path / "train.py"
    script.write_text('from checker.lab import start\nsession = start("00_measuring_right")\n')
    check_chapter(script, "00_measuring_right")  # its own chapter
    script.write_text('import checker.lab\nsession = checker.lab.start("01_item_syncs")\n')
    with pytest.raises(WorkbookError, match="chapter 01's"):
        check_chapter(script, "00_measuring_right")
    script.write_text('from checker.lab import start\nsession = start(CHAPTER)\n')
    check_chapter(script, "00_measuring_right")  # computed: left to the run


def test_submission_that_is_a_file_or_a_symlink_loop(workbook, tmp_path):
    (tmp_path / "train.py").write_text("x = 1\n")
    line = one_clear_line(workbook("check", "01", "--submission", str(tmp_path / "train.py"), "--device", "cpu"))
    assert "is a file, not a folder" in line
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    line = one_clear_line(workbook("check", "01", "--submission", str(tmp_path / "loop"), "--device", "cpu"))
    assert "symlink loop" in line and str(tmp_path / "loop") in line


@pytest.mark.parametrize("make, expected", [
    (lambda lab: lab.mkdir(), "train.py is a folder, not a file"),
    (lambda lab: lab.symlink_to(lab), "train.py is a symlink loop"),
    (lambda lab: lab.symlink_to("elsewhere.py"), "train.py is a symlink to elsewhere.py, which does not exist"),
])
def test_a_lab_that_is_not_a_file_is_said_to_be_so(workbook, tmp_path, make, expected):
    """Not "no train.py ... rename train.py to train.py" nor "missing": what is there, and that it is no file."""
    make(tmp_path / "train.py")
    line = one_clear_line(workbook("check", "01", "--submission", str(tmp_path), "--device", "cpu"))
    assert expected in line and "rename" not in line


def test_a_null_byte_in_the_lab_is_reported_on_its_line(workbook, tmp_path):
    lab = tmp_path / "train.py"
    lab.write_bytes(b"import os\nx = 1\ny = 'a\x00b'\n")
    before = lab.read_bytes()
    proc = workbook("check", "01", "--submission", str(tmp_path), "--device", "cpu")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    first = proc.stderr.strip().splitlines()[0]
    assert first.endswith("train.py:3:7: SyntaxError: source code cannot contain null bytes (a \\0 here)"), first
    assert "\x00" not in proc.stderr and lab.read_bytes() == before


def test_a_negative_baseline_interval_is_one_clear_line(workbook, tmp_path):
    line = one_clear_line(workbook("grade", "01", str(DATA), "--out", str(tmp_path / "g"), "--device", "cpu",
                                   "--baseline-every", "-2"))
    assert "--baseline-every -2" in line and not (tmp_path / "g").exists()


@pytest.mark.parametrize("option, value", [("--workers", "0"), ("--workers", "-3"), ("--student-timeout", "-5"),
                                           ("--student-timeout", "0"), ("--max-submission-mb", "-1"),
                                           ("--max-submission-mb", "nan")])
def test_grade_refuses_a_count_or_limit_below_one_or_zero_as_a_usage_error(workbook, tmp_path, option, value):
    proc = workbook("grade", "01", str(DATA), "--out", str(tmp_path / "g"), "--device", "cpu", f"{option}={value}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"argument {option}: {value}: give" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "g").exists()


def test_run_with_no_step_past_warm_up_says_how_many_steps(workbook):
    line = one_clear_line(workbook("run", "01", "--steps", "0", "--device", "cpu"))
    assert line.startswith("workbook: --steps 0: the first 5 steps on cpu are warm-up")
    assert "give --steps 6 or more" in line and "--warmup" not in line


def test_bad_option_value_is_a_usage_error(workbook):
    proc = workbook("check", "01", "--device", "tpu")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


@pytest.mark.slow
def test_lab_that_raises(workbook):
    line = one_clear_line(workbook("check", "01", "--submission", str(DATA / "raises"), "--device", "cpu"))
    assert "ValueError: shapes do not match" in line and "train.py:8" in line


@pytest.mark.slow
def test_lab_that_hangs(workbook, monkeypatch):
    monkeypatch.setenv("WORKBOOK_TIMEOUT_S", "20")
    line = one_clear_line(workbook("check", "01", "--submission", str(DATA / "hangs"), "--device", "cpu"))
    assert "did not finish within 20 s" in line


@pytest.mark.slow
def test_lab_that_leaves_the_loop_early_fails_same_work(workbook):
    proc = workbook("check", "01", "--submission", str(DATA / "skips_steps"), "--device", "cpu", "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    same_work = report["checks"][0]
    assert same_work["name"] == "same_work" and same_work["status"] == "failed"
    assert "work differs" in same_work["evidence"][0] and "after 3 of" in same_work["evidence"][0]
    assert all(c["status"] == "skipped" for c in report["checks"][1:])


def test_profile_prints_the_recipe(workbook):
    proc = workbook("profile", "01", "--tool", "nsys")
    assert proc.returncode == 0
    assert proc.stdout.startswith("nsys profile") and "--capture-range=cudaProfilerApi" in proc.stdout
    assert "labs/01_item_syncs/train.py" in proc.stdout


def test_every_recipe_prints_with_its_script_and_its_tools_own_braces(capsys):
    """Only {script} and {out} are filled in: nsys's %q{RANK} (chapter 09's one report per rank) stays as nsys reads it."""
    import argparse

    from checker.base.chapters import all_chapters
    from checker.cli.profile import cmd_profile

    printed = {}
    for chapter in all_chapters():
        for tool in chapter.recipe:
            args = argparse.Namespace(chapter=chapter.id, tool=tool, variant="lab", job=None, run=False)
            assert cmd_profile(args) == 0
            command = printed[chapter.number, tool] = capsys.readouterr().out.splitlines()[0]
            assert "{script}" not in command and "{out}" not in command and chapter.lab_file in command
    assert ".%q{RANK} python labs/09_data_parallel/train.py" in printed[9, "nsys"]


def test_profile_says_what_to_look_for_on_a_cpu_too(workbook):
    proc = workbook("profile", "06", "--tool", "torch")
    assert proc.returncode == 0 and proc.stdout.startswith("python ")
    assert "look for: workbook report on the trace" in proc.stderr
    assert "on a CPU, look for: workbook report's host syncs" in " ".join(proc.stderr.split())


def test_after_a_torch_profile_the_next_command_and_what_to_look_for_on_its_device(tmp_path, capsys):
    from checker.base.chapters import all_chapters, get_chapter
    from checker.cli.profile import after_torch_profile as _after_torch_profile

    # chapter 09's torch recipe starts two ranks (torch.distributed.run): what its traces show on a CPU is the page's
    assert [c.id for c in all_chapters() if "torch_cpu" not in c.look_for] == ["09_data_parallel"]
    chapter, out = get_chapter("01"), tmp_path / "lab-torch"
    _after_torch_profile(chapter, out)
    assert capsys.readouterr().out == ""  # no trace written: nothing to say
    (tmp_path / "lab-torch.json.gz").write_bytes(b"")
    for device, expected in (("cpu", "on this CPU, look for: " + chapter.look_for["torch_cpu"]),
                             ("cuda", "look for: " + chapter.look_for["torch"])):
        (tmp_path / "lab-torch.result.json").write_text(json.dumps({"device": device}))
        _after_torch_profile(chapter, out)
        printed = capsys.readouterr().out
        assert printed.startswith("next: workbook report ") and "lab-torch.json.gz" in printed
        assert expected in " ".join(printed.split())


def test_profile_without_nsys_here_says_where_the_command_runs(workbook, monkeypatch):
    """Printing nsys's recipe on a machine without nsys is fine (it is for the GPU machine), but say so."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("WORKBOOK_NSYS", raising=False)
    proc = workbook("profile", "01", "--tool", "nsys")
    assert proc.returncode == 0 and proc.stdout.startswith("nsys profile")
    assert "note: nsys is not found here" in proc.stderr and "--tool torch --run" in proc.stderr


def test_profile_run_without_nsys_explains(workbook, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("WORKBOOK_NSYS", raising=False)
    line = one_clear_line(workbook("profile", "01", "--tool", "nsys", "--run"))
    assert "nsys not found" in line and "--tool torch" in line


def test_keep_traces_into_a_file_or_where_no_folder_can_be_made_is_one_line_before_any_run(workbook, tmp_path):
    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    for folder, expected in ((afile, "is a file, not a folder"), (afile / "traces", "cannot create it")):
        proc = workbook("check", "01", "--device", "cpu", "--keep-traces", str(folder), timeout=60)
        line = one_clear_line(proc)
        assert f"--keep-traces {folder}" in line and expected in line and proc.stdout == ""
    assert afile.read_text() == "mine\n"


@pytest.mark.parametrize("make, expected", [
    (lambda d: d / "missing", "no such file"),
    (lambda d: d, "not a file"),
    (lambda d: _write(d / "nsys", "#!/bin/sh\n", mode=0o644), "not executable"),
])
def test_a_wrong_workbook_nsys_is_one_line_naming_it(workbook, tmp_path, monkeypatch, make, expected):
    named = make(tmp_path)
    monkeypatch.setenv("WORKBOOK_NSYS", str(named))
    line = one_clear_line(workbook("profile", "01", "--tool", "nsys", "--run"))
    assert f"WORKBOOK_NSYS={named}: {expected}" in line and "--tool torch" in line
    report = _write(tmp_path / "r.nsys-rep", "NVIDIA Tegra Profiler Report\n")
    line = one_clear_line(workbook("report", str(report)))
    assert f"WORKBOOK_NSYS={named} is not an executable file" in line


def test_a_workbook_nsys_that_will_not_start_is_one_line(workbook, tmp_path, monkeypatch):
    """Executable, yet no program this machine runs (no #!, another architecture): said, not a traceback."""
    monkeypatch.setenv("WORKBOOK_NSYS", str(_write(tmp_path / "nsys", "\x7fELF not really\n", mode=0o755)))
    report = _write(tmp_path / "r.nsys-rep", "NVIDIA Tegra Profiler Report\n")
    line = one_clear_line(workbook("report", str(report)))
    assert "could not start" in line and "Exec format error" in line


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_only_runs_the_named_checks_and_keeps_their_traces(workbook, tmp_path, pristine_lab):
    """--only host_syncs: the sync check runs (and fails on the lab as shipped), the others are skipped and say
    why; --keep-traces leaves the trace that check read, which `workbook report` can open."""
    proc = workbook("check", "01", "--submission", str(pristine_lab("01")), "--device", "cpu", "--only", "host_syncs",
                    "--keep-traces", str(tmp_path), "--json")
    assert proc.returncode == 1, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["host_syncs"]["status"] == "failed"
    assert checks["same_work"]["status"] == "skipped"
    assert checks["same_work"]["reason"] == "not selected (--only host_syncs)"
    kept = tmp_path / "01_item_syncs-candidate-torch.json.gz"
    assert kept.is_file(), sorted(p.name for p in tmp_path.iterdir())
    report = workbook("report", str(kept), "--json")
    assert report.returncode == 0 and json.loads(report.stdout)["steps"] > 0


def test_only_with_an_unknown_check_names_the_chapters_checks(workbook):
    line = one_clear_line(workbook("check", "01", "--device", "cpu", "--only", "host_sync"))
    assert "--only host_sync" in line and "host_syncs" in line and "same_work" in line


@pytest.mark.parametrize("command, value", [("check", ""), ("check", " , "), ("watch", ""), ("grade", "")])
def test_an_empty_only_is_refused_not_taken_as_all(workbook, tmp_path, command, value):
    """`--only "$CHECKS"` with the variable unset ran every check (graded every student)."""
    argv = [command, "01", *((str(DATA), "--out", str(tmp_path / "g")) if command == "grade" else ()),
            "--device", "cpu", "--only", value]
    line = one_clear_line(workbook(*argv))
    assert f"--only {value!r}: names no" in line and not (tmp_path / "g").exists()


def test_variant_with_submission_is_refused_not_ignored(workbook, pristine_lab):
    folder = pristine_lab("01")
    for variant in ("solution", "lab"):
        line = one_clear_line(workbook("check", "01", "--variant", variant, "--submission", str(folder),
                                       "--device", "cpu"))
        assert f"--variant {variant} and --submission {folder}: give one of them" in line


def test_progress_lines_name_each_run_of_a_script(pristine_lab):
    """On a terminal, `workbook check` says what it is running (a GPU check takes minutes); the lines come
    from the evaluation itself, so every run it makes is announced."""
    from checker.base.chapters import get_chapter
    from checker.grader.evaluate import evaluate

    lines = []
    lab = pristine_lab("01") / "train.py"
    report = evaluate(get_chapter("01"), submission=lab.parent, device="cpu", only={"same_work", "host_syncs"},
                      progress=lines.append)
    assert report.exit_code == 1
    # on a CPU, where chapter 01 grades no speed, one pair, both traced (host_syncs counts the reads the slow
    # script's own optimizer makes in its trace), then the referee
    assert lines[0:4:2] == ["traced run (torch): chapters/01_item_syncs/slow.py", f"traced run (torch): {lab}"]
    assert lines[4:] == ["referee: the trained weights, in a fresh process"]
    # after each run, where its seconds went: the phases add up to the run's wall time, none is negative
    for line in lines[1:4:2]:
        total, _, phases = line.strip().partition(" s: ")
        parts = dict(part.rsplit(" ", 1) for part in phases.split(", "))
        assert list(parts) == ["start-up", "build", "setup", "warm-up", "timed", "after", "exit"], line
        assert all(float(v) >= 0 for v in parts.values())
        # each number is printed to a tenth, so the printed phases may miss the printed total by up to half a
        # tenth per number (seven phases and the total); more than that is a phase lost or counted twice
        assert abs(sum(float(v) for v in parts.values()) - float(total)) <= 0.05 * (len(parts) + 1) + 1e-9


def test_fewer_steps_than_the_warm_up_is_one_line_not_a_traceback(workbook):
    proc = workbook("run", "01", "--steps", "2", "--device", "cpu")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "are warm-up, before anything is timed; give --steps" in proc.stderr + proc.stdout


def test_a_check_grades_once(monkeypatch, capsys):
    """`workbook check` runs the grader once per check (a merge once left it running every run twice)."""
    from checker import cli
    from checker.grader import evaluate as grader

    calls = []

    def fake_evaluate(chapter, **kwargs):
        calls.append(kwargs)
        return grader.Report(chapter=chapter.id, variant="solution", candidate="x", device="cpu", trace_tool="torch",
                             checks=[], wall_s=0.0)

    monkeypatch.setattr(grader, "evaluate", fake_evaluate)
    assert cli.main(["check", "01", "--variant", "solution", "--device", "cpu", "--json"]) == 0
    assert len(calls) == 1


def test_the_checkout_is_found_from_the_package_wherever_the_process_runs(tmp_path, monkeypatch):
    """A grading worker runs in a folder of its own: the checkout is found from checker/base/paths.py itself, not
    only from the working directory or WORKBOOK_ROOT (workbook grade failed so on a CPU)."""
    from checker.base.paths import repo_root

    monkeypatch.delenv("WORKBOOK_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert repo_root() == Path(__file__).resolve().parent.parent


def test_a_submission_without_the_lab_file_says_what_it_holds_and_a_near_miss(tmp_path):
    """An instructor's class: `TRAIN.py` or `main.py` handed in; the one line says what was found and, for a name
    that differs only in case, what to rename."""
    from checker.base.chapters import get_chapter
    from checker.base.errors import WorkbookError
    from checker.grader.precheck import resolve_candidate

    chapter = get_chapter("00")
    (tmp_path / "gina").mkdir()
    (tmp_path / "gina" / "TRAIN.py").write_text("print()\n")
    with pytest.raises(WorkbookError, match=r"found TRAIN\.py: rename TRAIN\.py to train\.py"):
        resolve_candidate(chapter, submission=tmp_path / "gina")
    (tmp_path / "dave").mkdir()
    with pytest.raises(WorkbookError, match="it holds no .py file"):
        resolve_candidate(chapter, submission=tmp_path / "dave")


def test_a_failed_step_time_report_cell_says_what_decided_it():
    """The gradebook cell of the unmodified chapter 00 lab: not a bare `failed`."""
    from checker.grading.gradebook import cell

    lab = {"name": "step_time_report", "status": "failed",
           "measured": {"reported": {"steps": 45, "mean_ms": 1.0}, "grader": {"steps": 40}, "worst_ratio": None}}
    assert cell(lab) == "failed (no p50/p90, 45 steps vs 40 timed)"
    off = {"name": "step_time_report", "status": "failed",
           "measured": {"reported": {"steps": 40, "p50_ms": 1, "p90_ms": 2}, "grader": {"steps": 40}, "worst_ratio": 2.0}}
    assert cell(off) == "failed (2.00x off)"


@pytest.mark.parametrize("argv", [("check", "01", "--submission", ""), ("grade", "01", "", "--out", "g")])
def test_an_empty_submission_path_is_refused_not_read_as_the_current_folder(workbook, tmp_path, argv):
    """Path("") is the current folder: `--submission ""` graded the checkout's own labs/ lab, `grade ""` took
    chapters/, checker/, ... for students."""
    proc = workbook(*(str(tmp_path / a) if a == "g" else a for a in argv), "--device", "cpu")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "give a folder (an empty path would mean the current folder)" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "g").exists()


def test_a_lab_that_crashes_in_native_code_is_one_line_naming_its_line(workbook):
    """A run killed by a signal: the run's fault handler printed its stack, and the grader names the script's line."""
    line = one_clear_line(workbook("check", "01", "--submission", str(DATA / "crashes"), "--device", "cpu"))
    assert "killed by signal 11 at " in line and "crashes/train.py:10" in line
    assert "Fatal Python error" not in line and "Extension modules" not in line


def test_a_fault_handlers_dump_is_not_taken_for_the_scripts_last_line():
    """A dump (a worker's or another rank's) ends at its list of modules; what the script said after it is its last
    line, not the dump."""
    from collections import deque

    from checker.grader.runs import _last_words

    tail = deque([b"step 1\nFatal Python error: Segmentation fault\n\nThread 0x1 (most recent call first):\n"
                  b'  File "w.py", line 3 in f\n\nExtension modules: torch (total: 1)\nValueError: the real error\n'])
    assert _last_words(tail, "none") == "its last line: ValueError: the real error"
    assert _last_words(deque([b"Fatal Python error: Aborted\n\n  File \"w.py\", line 3 in f\n"]), "none") == "none"
