"""The checker's imports run one way (docs/authors/architecture.md, "Imports run one way").

Every module's imports are read from its source (module-level, inside functions and under TYPE_CHECKING alike)
and held against the layers below. A circle between modules fails, and so does an import against the
direction; so does a chapter's workload.py or slow.py that imports more than the base and the candidate side.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKER = ROOT / "checker"

# each part, and the parts it may import (itself always)
LAYERS: dict[str, set[str]] = {
    "base": set(),
    "candidate": {"base"},
    "trace": {"base"},
    "checks": {"base", "trace"},
    "grader": {"base", "trace", "checks"},
    "doctor": {"base", "trace", "checks"},
    "learner": {"base", "trace", "checks", "grader"},
    "pages": {"base", "trace", "checks", "grader"},
    "grading": {"base", "trace", "checks", "grader", "learner"},
    "entry": {"base", "candidate", "trace", "checks", "grader", "learner", "pages", "grading", "cli", "doctor"},
    "cli": {"base", "candidate", "trace", "checks", "grader", "learner", "pages", "grading", "doctor"},
}
# modules of a part that run in the candidate's (or the user's) process: they are held to the candidate side's
# rule. `workbook doctor`'s launcher runs inside the user's own training job.
IN_CANDIDATE_PROCESS = {"checker.doctor.launch", "checker.doctor"}
# top-level modules: the public faces. lab.py and launch.py are what candidate scripts run, so they are the
# candidate side; the pytest plugin and `python -m checker` may use everything, as may the CLI (checker/cli/).
TOP = {"lab": "candidate", "launch": "candidate", "pytest_plugin": "entry", "__main__": "entry",
       "__init__": "base"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def part_of(module: str) -> str:
    if module in IN_CANDIDATE_PROCESS:
        return "candidate"
    parts = module.split(".")
    if len(parts) == 1:
        return TOP["__init__"]
    if (CHECKER / parts[1]).is_dir():
        return parts[1]
    return TOP[parts[1]]


def resolve(name: str, modules: set[str]) -> str | None:
    """The checker module an import names: the module itself, else its package (``from pkg import name``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(path: Path, modules: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    found = {resolve(name, modules) for name in names if name.split(".")[0] == "checker"}
    return {m for m in found if m is not None}


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in CHECKER.rglob("*.py") if "__pycache__" not in p.parts}
    modules = set(paths)
    return {name: imports_of(path, modules) - {name} for name, path in paths.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def against_direction(edges: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in sorted(edges.items()):
        mine = part_of(module)
        for target in sorted(targets):
            theirs = part_of(target)
            if theirs != mine and theirs not in LAYERS[mine]:
                wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
    return wrong


def test_every_part_of_the_checker_is_a_declared_layer():
    for path in CHECKER.iterdir():
        if path.is_dir() and path.name != "__pycache__":
            assert path.name in LAYERS, f"checker/{path.name}/ is in no layer: add it to LAYERS and the architecture page"
        elif path.suffix == ".py":
            assert path.stem in TOP, f"checker/{path.name} is a loose module: put it in the folder of its part"


def test_the_checkers_imports_form_no_circle():
    edges = graph()
    # the graph is read, not empty: the grader's known imports are in it, lazy ones included
    assert {"checker.grader.runs", "checker.checks.evidence", "checker.grader.plan"} <= edges["checker.grader.evaluate"]
    assert "checker.learner.progress" in edges["checker.cli.check"]
    assert circles(edges) == []


def test_the_checkers_imports_run_one_way():
    assert against_direction(graph()) == []


def chapter_code_against_direction(paths: list[Path], modules: set[str]) -> list[str]:
    """Each chapter file's imports of the checker that are not the base or the candidate side."""
    wrong = []
    for path in paths:
        for target in sorted(imports_of(path, modules)):
            if part_of(target) not in ("base", "candidate"):
                wrong.append(f"{path.name if not path.is_relative_to(ROOT) else path.relative_to(ROOT)} imports {target}")
    return wrong


def test_every_file_in_chapters_runs_in_the_candidates_process():
    """chapters/ holds only what the candidate's process runs (and the referee's, rebuilding the model): every
    Python file there, whatever its name, imports no more than the base and the candidate side; besides them a
    chapter holds its chapter.toml and nothing else (a results producer belongs in scripts/)."""
    files = sorted(p for p in (ROOT / "chapters").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    python = [p for p in files if p.suffix == ".py"]
    assert {p.name for p in python} == {"workload.py", "slow.py"}, "chapters/ holds Python files other than workload.py and slow.py"
    assert [p for p in files if p.suffix not in (".py", ".toml")] == []
    assert chapter_code_against_direction(python, set(graph())) == []


# -- the rule's own tests: it must be able to fail -----------------------------------------------------------
def test_a_chapter_file_importing_the_grader_is_found(tmp_path):
    producer = tmp_path / "stretch_results.py"
    producer.write_text("from checker.grader.runs import run_script\nfrom checker.base.paths import repo_root\n")
    modules = set(graph())
    assert len(chapter_code_against_direction([producer], modules)) == 1


def test_a_circle_is_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("edge, ok", [
    (("checker.checks.throughput", "checker.grader.evaluate"), False),   # a check reaching into the grader
    (("checker.candidate.session", "checker.checks.same_work"), False),  # the candidate side loading checks
    (("checker.grader.evaluate", "checker.checks.throughput"), True),
    (("checker.lab", "checker.grader.runs"), False),
    (("checker.cli", "checker.grading.classroom"), True),
    (("checker.doctor.launch", "checker.trace.analysis"), False),   # doctor's launcher runs in the user's job
    (("checker.doctor.diagnose", "checker.trace.analysis"), True),
    (("checker.cli.doctor", "checker.doctor.diagnose"), True),
])
def test_an_import_against_the_direction_is_found(edge, ok):
    module, target = edge
    assert (against_direction({module: {target}}) == []) == ok
