"""The red-team bank (tests/redteam/bank.toml): every cheating submission is rejected on a CPU.

Each cheat is graded as a student's submission would be, with `workbook check NN --submission DIR`, and must
end in exit 1 with the named checks failed, or exit 2 (refused), with the evidence the bank names. Cheats the
source scan refuses are graded a second time with the scan off, to show the run's own defences hold alone: those
gradings are tests of their own, marked ``scan_off``, which the default run leaves out (CI's 90 minutes held the
whole bank no longer); run them with ``python3 -m pytest -m scan_off tests/test_redteam.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BANK = ROOT / "tests" / "redteam"
CHEATS = tomllib.loads((BANK / "bank.toml").read_text())["cheats"]
pytestmark = [pytest.mark.slow, pytest.mark.redteam]
CRASHED = re.compile(r"was killed by signal (11|6|7)\b")  # SIGSEGV, SIGABRT, SIGBUS: a crash, not a verdict


LEFTOVER_MARKS = ("redteam-cache", "redteam_startup_hook", "redteam-decoded")  # in the names leftovers() looks for


def leftovers() -> list[Path]:
    """What cheats leave behind outside their run folders (where runs share the machine's scratch places)."""
    return ([Path("/var/tmp/redteam-cache-01.pt")] + [Path(p) / "redteam_startup_hook.pth" for p in site.getsitepackages()]
            + [*Path("/dev/shm").glob("redteam-decoded-*"), *Path("/tmp").glob("redteam-decoded-*")])


def selected_checks(cheat: dict) -> str | None:
    """The checks a cheat is graded on: its `only`, else the checks it must fail (with `checks_any`, those it must
    fail and those one of which must). The bank asks whether the named rule rejects the cheat; the checks it does not
    name are graded on the labs and solutions elsewhere in the suite, and leaving them out halves a chapter 03 cheat's
    time. A cheat rejected by whichever check fails (`expect` "any" or "refused") is graded on every check."""
    if cheat.get("only"):
        return cheat["only"]
    if cheat["expect"] == "failed" and (named := [*cheat.get("checks", []), *cheat.get("checks_any", [])]):
        return ",".join(dict.fromkeys(named))
    return None


def folder(name: str, cheat: dict) -> Path:
    """Where a cheat's files are: cheats/<name>, or its ``path`` under tests/redteam (one shared with gpu.toml)."""
    return BANK / cheat.get("path", f"cheats/{name}")


def grade(name: str, cheat: dict, root: Path, scan: bool = True,
          run_uid: int | None = None) -> tuple[int, str, dict | None]:
    """`workbook check` of one cheat from ``root``: (exit code, everything printed, the JSON report if any).
    ``run_uid``: the user id its runs drop to (a grading worker's own), where the grader is root."""
    command = [sys.executable, "-m", "checker", "check", cheat["chapter"], "--submission", str(folder(name, cheat)),
               "--device", "cpu", "--json"]
    if only := selected_checks(cheat):
        command += ["--only", only]
    env = dict(os.environ, WORKBOOK_ROOT=str(root), PYTHONPATH=str(root), WORKBOOK_SCAN="1" if scan else "0")
    if cheat.get("shared_scratch"):  # as where the kernel allows no mount namespace: what a run left is looked for
        env["WORKBOOK_PRIVATE_SCRATCH"] = "0"
    if run_uid is not None:
        env["WORKBOOK_RUN_UID"] = str(run_uid)
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode == 2 and CRASHED.search(proc.stderr):
        # a run crashed in torch's native code (rarely, on a loaded machine: dup_bag_09 once in CI): no verdict
        # either way, so the cheat is graded once more; a second crash is reported as it is
        print(f"{name}: a run crashed, graded once more: {proc.stderr.strip().splitlines()[-1][:300]}")
        proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    report = None
    if proc.returncode in (0, 1) and proc.stdout.strip().startswith("{"):
        report = json.loads(proc.stdout)
    return proc.returncode, proc.stdout + proc.stderr, report


def failed_checks(report: dict | None) -> set[str]:
    return {c["name"] for c in (report or {}).get("checks", []) if c["status"] == "failed"}


def assert_rejected(name: str, cheat: dict, code: int, output: str, report: dict | None, expect: str) -> None:
    shown = output[-3000:]
    assert code != 0, f"{name} ({cheat['class']}) PASSED:\n{shown}"
    if expect == "refused":
        assert code == 2, f"{name}: expected a refusal (exit 2), got exit {code}:\n{shown}"
    elif expect == "failed":
        assert code == 1, f"{name}: expected failed checks (exit 1), got exit {code}:\n{shown}"
        missing = set(cheat.get("checks", [])) - failed_checks(report)
        assert not missing, f"{name}: {sorted(missing)} did not fail:\n{shown}"
        if cheat.get("checks_any"):  # rejected by one of these, whichever the machine's load decides
            assert set(cheat["checks_any"]) & failed_checks(report), f"{name}: none of {cheat['checks_any']} failed:\n{shown}"
    else:
        assert code in (1, 2), f"{name}: exit {code}:\n{shown}"
    if cheat.get("evidence"):
        assert re.search(cheat["evidence"], output), f"{name}: no evidence matching {cheat['evidence']!r}:\n{shown}"


@pytest.fixture
def checkout(tmp_path):
    """Where to grade from: a copy of the checkout for cheats that change the grader's files."""

    def make(cheat: dict) -> Path:
        if not cheat.get("copy"):
            return ROOT
        copy = tmp_path / "checkout"
        for folder in ("checker", "chapters", "labs", "solutions"):
            shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
        return copy

    yield make
    for leftover in leftovers():  # what cheats leave behind outside their run folders
        leftover.unlink(missing_ok=True)


# Checks that count (reads, ops, samples, settings, weights) and time nothing: a cheat graded on these alone may be
# graded while another is, as `workbook grade --workers 2` grades two students at once where a chapter times none of
# its CPU checks (checker.grading.classroom), each with a user id of its own for its runs.
COUNTED_CHECKS = frozenset({"host_syncs", "same_work", "step_work", "loader_settings", "samples_in_workers",
                            "launches_per_step", "elementwise_kernels"})
SLOTS_ENV = "WORKBOOK_BANK_SLOTS"  # gradings at once (default 2 where the grader is root; 1: one after another)


def graded_beside_another(name: str, cheat: dict) -> bool:
    """Whether a cheat's verdict holds with another cheat graded beside it: its chapter's verdicts hold side by side
    for a class (no timed CPU check, one process per job), its checks all count, and it touches nothing that
    another grading shares (the grader's files, the machine's scratch places, other runs, things left behind)."""
    from checker.base.chapters import get_chapter
    from checker.grader.ranks import world_size
    from checker.grading.classroom import timed_cpu_checks

    chapter = get_chapter(cheat["chapter"])
    if timed_cpu_checks(chapter) or world_size(chapter.config("cpu")) > 1:
        return False
    if cheat.get("scanned") or cheat.get("copy") or cheat.get("shared_scratch") or int(cheat.get("runs", 1)) > 1:
        return False
    code = (folder(name, cheat) / "train.py").read_text()
    if name == "read_other_runs" or any(mark in code for mark in LEFTOVER_MARKS):
        return False
    only = selected_checks(cheat)
    return only is not None and set(only.split(",")) <= COUNTED_CHECKS


BESIDE = sorted(name for name, cheat in CHEATS.items() if graded_beside_another(name, cheat))
ALONE = sorted(set(CHEATS) - set(BESIDE))


@pytest.mark.parametrize("name", ALONE)
def test_cheat_is_rejected(name, checkout):
    cheat = CHEATS[name]
    root = checkout(cheat)
    for leftover in leftovers():
        leftover.unlink(missing_ok=True)
    for _ in range(int(cheat.get("runs", 1))):
        code, output, report = grade(name, cheat, root)
    if cheat.get("scanned"):  # with the scan off: test_a_scanned_cheat_is_rejected_with_the_scan_off
        assert code == 2 and "is refused: it inspects how it is measured" in output, output[-3000:]
        return
    _assert_graded(name, cheat, code, output, report)


@pytest.fixture(scope="module")
def side_by_side(request):
    """The gradings of the selected `beside` cheats, started in the order pytest runs them, ``slots`` at once:
    a future per cheat's name, whose result is its grading. By the time its last test has its verdict, every grading has ended (each earlier
    test waited for its own), so no grading runs beside the tests that come after."""
    from concurrent.futures import ThreadPoolExecutor
    from queue import SimpleQueue

    from checker.grader import sandbox

    selected = [item.callspec.params["name"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_cheat_is_rejected_beside_another"]
    slots = int(os.environ.get(SLOTS_ENV) or (2 if sandbox.running_as_root() else 1))
    uids: SimpleQueue = SimpleQueue()
    for uid in (sandbox.worker_uids(slots) if slots > 1 else [None]):
        uids.put(uid)

    def grade_in_a_slot(name: str):
        uid = uids.get()
        try:
            return grade(name, CHEATS[name], ROOT, run_uid=uid)
        finally:
            uids.put(uid)

    pool = ThreadPoolExecutor(max_workers=max(slots, 1), thread_name_prefix="bank")
    for leftover in leftovers():
        leftover.unlink(missing_ok=True)
    futures = {name: pool.submit(grade_in_a_slot, name) for name in selected}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("name", BESIDE)
def test_cheat_is_rejected_beside_another(name, side_by_side):
    """As test_cheat_is_rejected, for the cheats whose verdicts hold with another cheat graded at the same time
    (graded_beside_another): two at a time, each with a user id of its own for its runs, where the grader is root."""
    code, output, report = side_by_side[name].result()
    _assert_graded(name, CHEATS[name], code, output, report)


@pytest.mark.scan_off
@pytest.mark.parametrize("name", sorted(n for n, c in CHEATS.items() if c.get("scanned") and not c.get("scan_only")))
def test_a_scanned_cheat_is_rejected_with_the_scan_off(name, checkout):
    """The run's own defences, without the source scan that refuses the cheat first."""
    cheat = CHEATS[name]
    root = checkout(cheat)
    for leftover in leftovers():
        leftover.unlink(missing_ok=True)
    code, output, report = grade(name, cheat, root, scan=False)
    _assert_graded(name, cheat, code, output, report)


def _assert_graded(name: str, cheat: dict, code: int, output: str, report: dict | None) -> None:
    if "expect_dropped" in cheat:
        from checker.grader.sandbox import run_identity

        if run_identity() is not None:  # runs dropped to another user: the tampering is prevented, not detected
            cheat = dict(cheat, expect=cheat["expect_dropped"], evidence=cheat.get("evidence_dropped"),
                         checks=cheat.get("checks_dropped", []))
    assert_rejected(name, cheat, code, output, report, cheat["expect"])



def test_native_code_of_its_own_is_not_counted_as_fewer_ops_on_a_cpu():
    """A block's small ops done in C loops of an extension the script builds at start-up (tests/redteam/accepted/)
    record no op, fused or not: one call per small op (percall_cext_04, in the bank) counted as none just as the
    fused loops did. On a CPU the op-count checks cannot tell the two apart, so both fail, saying why and where the
    work is counted (a GPU, where each kernel is a launch); the other checks still pass the fused loops."""
    import sysconfig

    if shutil.which("cc") is None or not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        pytest.skip("needs a C compiler and Python's headers, which this machine lacks, to build the extension")
    cheat = {"chapter": "04", "path": "accepted/cext_blocks_04", "expect": "failed"}
    code, output, _ = grade("cext_blocks_04", cheat, ROOT)
    assert code == 2 and "starts another program" in output, output[-3000:]  # the scan: it starts its compiler
    code, output, report = grade("cext_blocks_04", cheat, ROOT, scan=False)  # the rule behind the scan
    assert code == 1, output[-3000:]
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status["launches_per_step"] == "failed" and status["same_work"] == status["step_work"] == "passed"
    assert "native code of the script's own" in output


@pytest.mark.slow
def test_the_same_loss_summed_in_another_order_is_the_same_work_on_a_cpu():
    """Chapter 06's CPU weights tolerance is tight (0.003: a loss left out on half the pixels is other work, and
    honest float32 runs land 0.0000 from the slow script's): an honest variant that sums the same losses in another
    order (tests/redteam/accepted/reordered_06) still passes same_work, with room to spare."""
    cheat = {"chapter": "06", "path": "accepted/reordered_06", "expect": "passed", "only": "same_work"}
    code, output, report = grade("reordered_06", cheat, ROOT)
    assert code == 0 and report is not None, output[-3000:]
    same_work = next(c for c in report["checks"] if c["name"] == "same_work")
    tolerance = same_work["threshold"]["weight_tolerance"]
    assert same_work["status"] == "passed" and same_work["measured"]["weight_distance"] <= tolerance / 10, same_work


def test_every_class_of_the_issue_has_two_cheats():
    classes: dict[str, int] = {}
    for cheat in CHEATS.values():
        classes[cheat["class"]] = classes.get(cheat["class"], 0) + 1
    wanted = {"forging measurements", "moving work out of sight", "acting differently when observed",
              "doing less work", "lying to settings checks", "tampering",
              "work moved before the window", "a trace rewritten",  # the out-of-sight-evidence issue's classes
              "a decode kept instead of overlapped", "state kept across runs", "a report made true"}  # issue 43's
    assert set(classes) == wanted
    assert all(count >= 2 for count in classes.values()), classes
    assert all((folder(name, cheat) / "train.py").is_file() for name, cheat in CHEATS.items())


def _code_lines(path: Path) -> list[str]:
    """A script's code, one statement per line: its docstring, comments and layout left out."""
    import ast

    tree = ast.parse(path.read_text())
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        tree.body = tree.body[1:]
    return ast.unparse(tree).splitlines()


@pytest.mark.parametrize("name", sorted(n for n, c in CHEATS.items() if "derived_from" in c))
def test_a_cheat_derived_from_a_script_is_that_script_with_its_cheat(name):
    """A cheat that is a chapter's solution (or slow script) with one change must follow that script when it
    changes: otherwise it tests a submission no student would write from today's files."""
    import difflib

    from checker.base.chapters import get_chapter

    cheat = CHEATS[name]
    script = get_chapter(cheat["chapter"]).script_for(cheat["derived_from"])
    changed = [line for line in difflib.unified_diff(_code_lines(script), _code_lines(folder(name, cheat) / "train.py"),
                                                     lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len(changed) == cheat["changed_lines"], (
        f"{name} is {len(changed)} lines of code from {script.relative_to(ROOT)}, not its changed_lines "
        f"{cheat['changed_lines']}: apply the cheat to today's script (then set changed_lines)\n" + "\n".join(changed[:20]))
