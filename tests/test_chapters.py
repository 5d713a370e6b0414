"""The workbook checks itself, like rustlings' `dev check`: every chapter is complete and consistent."""

import ast
import re

import pytest

from checker import checks
from checker.base.chapters import DEVICE_KINDS, all_chapters, get_chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path
from checker.grader.pristine import code_of, has_git_history, shipped_lab

CHAPTERS = all_chapters()
IDS = [c.id for c in CHAPTERS]


def test_there_are_chapters():
    assert "01_item_syncs" in IDS


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_chapter_has_every_part(chapter):
    missing = [str(p) for p in (chapter.slow_script, chapter.lab_script, chapter.solution_script,
                                chapter.dir / "workload.py", chapter.docs_page) if not p.is_file()]
    assert not missing, f"{chapter.id} is missing: {', '.join(missing)}"
    for tool in ("nsys", "torch"):
        assert tool in chapter.recipe, f"add recipe.{tool} to chapters/{chapter.id}/chapter.toml"
        assert tool in chapter.look_for, f"add recipe.look_for.{tool} to chapters/{chapter.id}/chapter.toml"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_every_check_is_known_and_decided_per_device(chapter):
    assert chapter.checks, f"add [[checks]] to chapters/{chapter.id}/chapter.toml"
    assert chapter.checks[0].name == "same_work", "same_work must come first: the other checks compare runs of it"
    for spec in chapter.checks:
        assert spec.name in checks.KINDS, f"{chapter.id}: unknown check {spec.name}"
        if spec.name == "same_work":
            continue
        for device in DEVICE_KINDS:
            decided = spec.threshold_for(device) is not None or spec.skip_reason_for(device)
            assert decided, f"{chapter.id}: give check {spec.name} threshold.{device} or skip.{device} = '<reason>'"
        assert chapter.hint_for(spec.name, []), f"{chapter.id}: add a default [[hints]] for check {spec.name}"


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if any(s.name == "data_wait" for s in c.checks)],
                         ids=lambda c: c.id)
def test_data_wait_judges_steady_steps_and_on_a_cpu_only_keyed_epochs(chapter):
    """The first batch of an epoch waits for the workers to start the new epoch, once per epoch: data_wait leaves
    such a step out (chapter 03's solution, traced in a tail that began an epoch, failed data_wait on CI's machine
    when it did not: stop 35), so at least three steady steps must remain to judge. On a CPU every traced step is in
    an epoch that began at or after the window opened, keyed by the window's key (checker.base.workloads.KeyedEpochs),
    so that no epoch a traced step reads can be decoded before the window (red team 10)."""
    for device in chapter.workload:
        cfg = chapter.config(device)
        epoch, warmup, log_every = int(cfg.get("epoch_batches") or 0), int(cfg["warmup"]), int(cfg.get("log_every") or 0)
        tails = (False, True) if cfg.get("traced_tail") else (False,)
        for tail in tails:
            traced = chapter.traced_steps(device, tail)
            judged = [s for s in traced if not (epoch and s and s % epoch == 0)
                      and not (log_every and (s + 1) % log_every == 0)]
            assert len(judged) >= 3, f"{chapter.id} on {device}: only steps {judged} of {list(traced)} are judged"
            if device == "cpu" and epoch and not tail:
                first = [s for s in traced if (s // epoch) * epoch < warmup]
                assert not first, (f"{chapter.id} on {device}: traced step {first[0]} is in an epoch that began before "
                                   f"the window opened at step {warmup} (epoch_batches = {epoch}): its samples can be "
                                   "made in set-up")


def _shipped_lab(chapter):
    """The lab as shipped (never the learner's edits): the working copy while it is the slow script's code,
    else the newest committed version that is (checker.grader.pristine)."""
    found = shipped_lab(chapter)
    if found is None:
        if not has_git_history():
            pytest.skip(f"{display_path(chapter.lab_script)} was edited and this checkout has no git history "
                        "holding the shipped lab, so the shipped lab cannot be checked here")
        pytest.fail(f"{display_path(chapter.lab_script)} is not {display_path(chapter.slow_script)}'s code, and no "
                    "committed version of it is: the lab must be the slow script plus TODO comments; edit the two together")
    return found[0]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_lab_has_todos_and_solution_has_none(chapter):
    lab = _shipped_lab(chapter)
    assert "TODO" in lab, f"{chapter.lab_script} must mark where the fix goes with TODO"
    assert "TODO" not in chapter.solution_script.read_text()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_scripts_start_the_session_of_their_own_chapter(chapter):
    scripts = {chapter.slow_script: chapter.slow_script.read_text(), chapter.lab_script: _shipped_lab(chapter),
               chapter.solution_script: chapter.solution_script.read_text()}
    for script, text in scripts.items():
        tree = ast.parse(text)
        assert ast.get_docstring(tree), f"{script} should open with a docstring saying what it shows"
        calls = re.findall(r'start\("([^"]+)"\)', text)
        assert calls == [chapter.id], f"{script} must call start({chapter.id!r}) once"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_lab_is_the_slow_script_until_edited(chapter):
    """The lab is the learner's copy of the baseline: the same code once comments and docstrings are gone."""
    assert code_of(_shipped_lab(chapter)) == code_of(chapter.slow_script.read_text())


def test_a_fixed_lab_does_not_hide_the_shipped_one(tmp_path, monkeypatch):
    """A learner who fixed a lab (here: the solution copied over it) still has the shipped lab found for the tests,
    from git's history; without a shipped copy the slow script stands in, with the same code."""
    import shutil
    import subprocess

    from checker.base import paths
    from checker.base.chapters import all_chapters as chapters_of
    from checker.grader.pristine import write_pristine_lab

    root = tmp_path / "checkout"
    for folder in ("chapters", "labs", "solutions", "checker"):
        shutil.copytree(paths.repo_root() / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "labs" / "01_item_syncs" / "train.py").write_text(_shipped_lab(get_chapter("01")))
    git = lambda *args: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                                       check=True, capture_output=True)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "as shipped")
    lab = root / "labs" / "01_item_syncs" / "train.py"
    shipped = lab.read_text()
    shutil.copy(root / "solutions" / "01_item_syncs" / "train.py", lab)
    git("commit", "-qam", "my fix")  # even committed
    monkeypatch.setenv("WORKBOOK_ROOT", str(root))
    paths.repo_root.cache_clear()
    chapters_of.cache_clear()
    try:
        chapter = get_chapter("01")
        assert shipped_lab(chapter)[0] == shipped
        path, origin = write_pristine_lab(chapter, tmp_path / "pristine")
        assert path.read_text() == shipped and origin.startswith("git ")
        shutil.rmtree(root / ".git")
        path, origin = write_pristine_lab(chapter, tmp_path / "no-git")
        assert origin == "chapters/01_item_syncs/slow.py" and code_of(path.read_text()) == code_of(shipped)
    finally:
        paths.repo_root.cache_clear()
        chapters_of.cache_clear()


def test_a_filled_answer_and_a_course_assignment_do_not_hide_the_shipped_ones(tmp_path, monkeypatch):
    """Chapter 08's learner fills in answer.toml and may get a course's assignment.toml: the tests' pristine lab still
    holds the shipped blank form and the practice assignment, from git's history (the learner's even committed);
    without .git, a side file holding the learner's work is left out, never passed off as the shipped one."""
    import shutil
    import subprocess

    from checker.base import paths
    from checker.base.chapters import all_chapters as chapters_of
    from checker.grader.assignment import draw
    from checker.grader.pristine import no_shipped_copy, shipped_side_file, write_pristine_lab

    root = tmp_path / "checkout"
    for folder in ("chapters", "solutions", "checker"):
        shutil.copytree(paths.repo_root() / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    lab_folder = root / "labs" / "08_triage"
    write_pristine_lab(get_chapter("08"), lab_folder)  # this checkout's lab folder as shipped, not the learner's
    if not (lab_folder / "answer.toml").is_file() or not (lab_folder / "assignment.toml").is_file():
        pytest.skip(no_shipped_copy(get_chapter("08"), "answer.toml"))
    git = lambda *args: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                                       check=True, capture_output=True)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "as shipped")
    blank, practice = (lab_folder / "answer.toml").read_text(), (lab_folder / "assignment.toml").read_text()
    shutil.copy(root / "solutions" / "08_triage" / "answer.toml", lab_folder / "answer.toml")
    git("commit", "-qam", "my answer")  # even committed
    monkeypatch.setenv("WORKBOOK_ROOT", str(root))
    paths.repo_root.cache_clear()
    chapters_of.cache_clear()
    try:
        chapter = get_chapter("08")
        (lab_folder / "assignment.toml").write_text(draw(chapter, "ann", key="course", kind="course").to_toml())
        assert shipped_side_file(chapter, "answer.toml")[0] == blank
        assert shipped_side_file(chapter, "assignment.toml")[0] == practice
        folder = write_pristine_lab(chapter, tmp_path / "pristine")[0].parent
        assert (folder / "answer.toml").read_text() == blank and (folder / "assignment.toml").read_text() == practice
        shutil.rmtree(root / ".git")
        assert shipped_side_file(chapter, "answer.toml") is None
        folder = write_pristine_lab(chapter, tmp_path / "no-git")[0].parent
        assert not (folder / "answer.toml").exists() and not (folder / "assignment.toml").exists()
    finally:
        paths.repo_root.cache_clear()
        chapters_of.cache_clear()


@pytest.mark.parametrize("key", ["01", "1", "01_item_syncs"])
def test_chapter_found_by_id_or_number(key):
    assert get_chapter(key).id == "01_item_syncs"


def test_unknown_chapter_says_which_exist():
    with pytest.raises(WorkbookError, match="known chapters: 00_measuring_right, 01_item_syncs"):
        get_chapter("99")


# Every committed GPU run of chapter 01 with same_work measured (evidence/history), H100 and H200
CHAPTER_01_GPU_ROWS = (
    "2026-11-23-h100-trust-1.jsonl", "2026-11-23-h100-trust-2.jsonl", "2026-11-25-h100-phases-before.jsonl",
    "2026-11-25-h100-call2-checks-graded-twice.jsonl", "2026-11-25-h100-call4-checks.jsonl",
    "2026-11-25-h100-call8-start-ahead-checks.jsonl", "2026-11-25-h100-session29-call1-checks.jsonl",
    "2026-11-25-h100-session29-call3-forkserver-refused.jsonl", "2026-11-25-h100-session29-call4-forkserver-ab.jsonl",
    "2026-11-25-h100-session30-call2-checks.jsonl", "2026-11-25-h100-session31-call1-checks.jsonl",
    "2026-11-25-h200-call3-checks.jsonl", "2026-11-25-h200-call5-checks.jsonl",
    "2026-11-26-h100-session33-call4-prestart-ab.jsonl", "2026-11-26-h100-session34-call8-checks.jsonl",
    "2026-11-26-h100-session34-call12-01-traced-pair.jsonl",
)


def test_chapter_01s_gpu_weight_tolerance_passes_every_recorded_float32_pair():
    """Chapter 01's same_work on a GPU: every float32 pair measured (solution and lab, H100 and H200) lands inside the
    committed weight tolerances, the lab's 0.054 of session 34 included (chapter.toml says why bf16 cannot be told
    apart here)."""
    from checker.checks.same_work import tolerances
    from gradinglib import recorded_same_work, weights_rejected

    limits = tolerances(get_chapter("01").check("same_work"), "cuda")
    judged = 0
    for variant, measured in recorded_same_work("01_item_syncs", CHAPTER_01_GPU_ROWS):
        if variant not in ("solution", "lab"):
            continue
        for distance in measured["weight_distances"]:
            assert not weights_rejected(distance, measured["worst_layer"], limits), (variant, distance)
            judged += 1
    assert judged >= 18


def test_chapter_01s_traced_pair_tells_float32_from_bf16():
    """Chapter 01 keeps a traced pair of its own on a GPU: after its 50 steps every recorded float32 pair (solution
    and lab, H100 and H200) lands inside traced_weight_tolerance and every bf16 cheat outside it, while the timed
    pairs' tolerance lets both through (chapter.toml says why)."""
    from checker.checks.same_work import tolerances, traced_limits
    from gradinglib import recorded_same_work, weights_rejected

    spec = get_chapter("01").check("same_work")
    timed = tolerances(spec, "cuda")
    short = traced_limits(spec, "cuda", timed)
    assert short["weight_tolerance"] < timed["weight_tolerance"] and traced_limits(spec, "cpu", timed) == timed
    bf16 = ("cheat/gpu/poll_wait_01", "cheat/gpu/junk_work_01", "cheat/gpu/rewrite_trace_01")
    seen = {"honest": 0, "bf16": 0}
    for variant, measured in recorded_same_work("01_item_syncs", CHAPTER_01_GPU_ROWS):
        kind = "honest" if variant in ("solution", "lab") else "bf16" if variant in bf16 else None
        distances = measured.get("weight_distances") or []
        if kind is None or len(distances) < 2:
            continue  # another cheat, or a check that made no traced pair
        traced = distances[-1]  # the pairs are the timed ones, then the traced pair
        assert weights_rejected(traced, 0.0, short) == (kind == "bf16"), (variant, traced)
        assert not weights_rejected(traced, 0.0, timed)
        seen[kind] += 1
    assert seen["honest"] >= 20 and seen["bf16"] >= 4


def test_same_work_judges_a_traced_pair_of_its_own_by_its_own_tolerance():
    """Chapter 01 on a GPU: 0.03 of the training apart passes in a timed pair (tolerance 0.1) and fails in the
    traced pair (traced_weight_tolerance 0.018); a traced pair that is the first timed pair (traced_tail) is a
    timed pair."""
    from pathlib import Path

    from checker.checks.evidence import Evidence
    from checker.checks.same_work import same_work

    class Run:
        samples = 512

    def judged(relative):
        return {"baseline": {"eval_loss": 1.0}, "candidate": {"eval_loss": 1.0, "distance": {
            "relative": relative, "worst_tensor": relative, "worst_tensor_name": "fc.weight", "counts_differ": []}}}

    chapter = get_chapter("01")
    spec = chapter.check("same_work")
    timed, traced = (Run(), Run()), (Run(), Run())

    def verdict(pairs_timed, pair_traced, distances):
        evidence = Evidence(chapter=chapter, device="cuda", trace_tool="torch", candidate=Path("train.py"), cfg={},
                            timed=pairs_timed, traced=pair_traced,
                            verdicts={i: judged(d) for i, d in enumerate(distances)})
        return same_work(evidence, spec)

    assert verdict((timed,), traced, [0.03, 0.01]).status == "passed"
    failed = verdict((timed,), traced, [0.01, 0.03])
    assert failed.status == "failed" and "tolerance 0.018" in failed.evidence[0]
    assert verdict((timed,), timed, [0.03]).status == "passed"  # the traced pair is the timed one: 0.1 applies
