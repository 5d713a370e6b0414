"""The workbook checks itself, like rustlings' `dev check`: every chapter is complete and consistent."""

import ast
import re

import pytest

from checker import checks
from checker.chapters import DEVICE_KINDS, all_chapters, get_chapter
from checker.errors import WorkbookError

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
        assert spec.name in checks.REGISTRY, f"{chapter.id}: unknown check {spec.name}"
        if spec.name == "same_work":
            continue
        for device in DEVICE_KINDS:
            decided = spec.threshold_for(device) is not None or spec.skip_reason_for(device)
            assert decided, f"{chapter.id}: give check {spec.name} threshold.{device} or skip.{device} = '<reason>'"
        assert chapter.hint_for(spec.name, []), f"{chapter.id}: add a default [[hints]] for check {spec.name}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_lab_has_todos_and_solution_has_none(chapter):
    lab = chapter.lab_script.read_text()
    assert "TODO" in lab, f"{chapter.lab_script} must mark where the fix goes with TODO"
    assert "TODO" not in chapter.solution_script.read_text()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_scripts_start_the_session_of_their_own_chapter(chapter):
    for script in (chapter.slow_script, chapter.lab_script, chapter.solution_script):
        tree = ast.parse(script.read_text())
        assert ast.get_docstring(tree), f"{script} should open with a docstring saying what it shows"
        calls = re.findall(r'start\("([^"]+)"\)', script.read_text())
        assert calls == [chapter.id], f"{script} must call start({chapter.id!r}) once"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_lab_is_the_slow_script_until_edited(chapter):
    """The lab is the learner's copy of the baseline: the same code once comments and docstrings are gone."""

    def code(path):
        return ast.dump(_strip_docstrings(ast.parse(path.read_text())))

    assert code(chapter.lab_script) == code(chapter.slow_script)


def _strip_docstrings(tree):
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return tree


@pytest.mark.parametrize("key", ["01", "1", "01_item_syncs"])
def test_chapter_found_by_id_or_number(key):
    assert get_chapter(key).id == "01_item_syncs"


def test_unknown_chapter_says_which_exist():
    with pytest.raises(WorkbookError, match="known chapters: 00_measuring_right, 01_item_syncs"):
        get_chapter("99")
