"""Every number of DataLoader workers a hint or a reference solution computes from os.cpu_count() is at least one,
on any machine: 0 workers fails chapter 03's loader_settings on a CPU. Fast: nothing is trained."""

import ast
import re
import types
from pathlib import Path

import pytest

from checker.base.chapters import all_chapters, get_chapter

ROOT = Path(__file__).resolve().parent.parent
CORES = (1, 2, 3, None)  # os.cpu_count() may be None


def _fake_os(cores):
    return types.SimpleNamespace(cpu_count=lambda: cores)


def _hint_formulas():
    """(chapter, an inline-code expression of a hint that calls os.cpu_count())."""
    return [(chapter.id, code) for chapter in all_chapters() for hint in chapter.hints for _, text in hint.steps
            for code in re.findall(r"`([^`]*cpu_count[^`]*)`", text)]


def _solution_formulas():
    """(solution file, the expression its num_workers is assigned), for every solution that calls os.cpu_count()."""
    found = []
    for path in sorted((ROOT / "solutions").glob("*/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "num_workers" for t in node.targets)
                    and "cpu_count" in ast.unparse(node.value)):
                found.append((path.relative_to(ROOT).as_posix(), node.value))
    return found


def _workers(expression, cores) -> int:
    session = types.SimpleNamespace(cfg={})  # no --set num_workers: the formula decides
    return eval(compile(ast.Expression(expression), "<formula>", "eval"), {"os": _fake_os(cores), "session": session})


def test_the_hints_and_solutions_hold_formulas_to_check():
    assert any(chapter == "03_dataloader_workers" for chapter, _ in _hint_formulas())
    assert any("03_dataloader_workers" in path for path, _ in _solution_formulas())


@pytest.mark.parametrize("cores", CORES)
def test_every_worker_formula_gives_at_least_one_worker(cores):
    for path, expression in _solution_formulas():
        assert _workers(expression, cores) >= 1, f"{path}: {ast.unparse(expression)} on {cores} cores"
    for chapter, code in _hint_formulas():
        if "-" in code or "max(" in code:  # a formula, not a mention such as `os.cpu_count()`
            assert _workers(ast.parse(code, mode="eval").body, cores) >= 1, f"{chapter}'s hint: {code} on {cores}"


def test_chapter_03_hint_gives_the_reference_solutions_formula():
    """The hint's formula is the solution's, spelled the same (the fallback after `cfg.get(...) or`)."""
    (_, value), = [f for f in _solution_formulas() if "03_dataloader_workers" in f[0]]
    call = value.args[0] if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "int" else value
    formula = call.values[-1] if isinstance(call, ast.BoolOp) else call
    texts = " ".join(text for hint in get_chapter("03").hints for _, text in hint.steps)
    assert f"`{ast.unparse(formula)}`" in " ".join(texts.split())
