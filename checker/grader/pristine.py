"""The labs as shipped, whatever the learner has done to their copy in labs/.

The workbook's own tests grade the unmodified labs (they must fail) and read their lines, and the pages show
them; neither may use the learner's edits, or fixing a lab would turn `python3 -m pytest` red and change the
site. A lab as shipped is the slow script's code with TODO comments (tests/test_chapters.py holds the two to
that), so it is recognised by its code: the working copy when it is still the slow script's code, else the
newest committed version that is. A lab's side files (chapter 08's answer form and assignment) are recognised
the same way, each by what only the shipped one is: an answer form with every value blank, the practice
learner's assignment.
"""

from __future__ import annotations

import ast
import subprocess
import tomllib
from pathlib import Path
from typing import Callable

from checker.base.chapters import Chapter
from checker.base.paths import repo_root


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return tree


def code_of(source: str) -> str | None:
    """The code of a script without comments and docstrings (None when it does not parse)."""
    try:
        return ast.dump(_strip_docstrings(ast.parse(source)))
    except (SyntaxError, ValueError):
        return None


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=repo_root(), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _shipped(path: Path, is_shipped: Callable[[str], bool]) -> tuple[str, str] | None:
    """(text, where it came from) of the file at ``path`` as shipped: the working copy when ``is_shipped`` holds
    of it, else the newest version in git's history that it holds of; None when neither is found."""
    working = path.read_text() if path.is_file() else None
    if working is not None and is_shipped(working):
        return working, str(path.relative_to(repo_root()))
    relative = path.relative_to(repo_root()).as_posix()
    revisions = _git("log", "--format=%H", "--", relative)
    for revision in (revisions or "").split():
        text = _git("show", f"{revision}:{relative}")
        if text is not None and is_shipped(text):
            return text, f"git {revision[:10]}:{relative}"
    return None


def shipped_lab(chapter: Chapter) -> tuple[str, str] | None:
    """(text, where it came from) of the chapter's lab as shipped, or None when no copy of it can be found.

    The working copy counts when its code is the slow script's; otherwise git's history of the lab file is
    searched, newest first, for a version that is. None: the lab was edited and this checkout has no history
    holding the shipped version (a download without .git, or the slow script changed without the lab).
    """
    slow = code_of(chapter.slow_script.read_text())
    return _shipped(chapter.lab_script, lambda text: code_of(text) == slow)


def _toml(text: str) -> dict | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def _blank(value) -> bool:
    if isinstance(value, dict):
        return all(_blank(v) for v in value.values())
    if isinstance(value, list):
        return all(_blank(v) for v in value)
    return not value  # "", 0, 0.0, false


def side_files(chapter: Chapter) -> dict[str, Callable[[str], bool]]:
    """The files a chapter's lab folder ships beside the lab file, each with how its shipped version is told
    from the learner's: chapter 08's answer form (every value blank) and its assignment (the practice learner's,
    which `workbook assign` and a course's file replace)."""
    from checker.grader.assignment import ASSIGNMENT_FILE, PRACTICE_LEARNER

    files: dict[str, Callable[[str], bool]] = {}
    if chapter.raw.get("answer_file"):
        files[str(chapter.raw["answer_file"])] = lambda text: (data := _toml(text)) is not None and _blank(data)
    if chapter.raw.get("jobs"):
        files[ASSIGNMENT_FILE] = lambda text: (data := _toml(text)) is not None and \
            data.get("secret") == "practice" and data.get("learner") == PRACTICE_LEARNER
    return files


def shipped_side_file(chapter: Chapter, name: str) -> tuple[str, str] | None:
    """(text, where it came from) of a file the lab folder ships beside the lab (side_files), as shipped; None when
    the learner's copy is theirs and this checkout has no history holding the shipped one."""
    return _shipped(chapter.lab_script.parent / name, side_files(chapter)[name])


def no_shipped_copy(chapter: Chapter, name: str) -> str:
    """Why a shipped file cannot be had here (a test's skip reason, a page's note)."""
    return (f"labs/{chapter.id}/{name} holds the learner's work and this checkout has no git history holding the "
            "shipped one, so the shipped one cannot be read here")


def has_git_history() -> bool:
    return _git("rev-parse", "--git-dir") is not None


def write_pristine_lab(chapter: Chapter, folder: Path) -> tuple[Path, str]:
    """Write the lab as shipped into ``folder`` (as a submission folder), with its side files as shipped, and say
    where the lab came from.

    When no shipped copy is found, the slow script stands in: it is the same code, so it earns the same verdicts.
    A side file with no shipped copy here is left out (chapter 08's lab then has no answer: it fails all the same).
    """
    found = shipped_lab(chapter)
    text, origin = found if found else (chapter.slow_script.read_text(),
                                        str(chapter.slow_script.relative_to(repo_root())))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / chapter.lab_file
    path.write_text(text)
    for name in side_files(chapter):
        side = shipped_side_file(chapter, name)
        if side is not None:
            (folder / name).write_text(side[0])
    return path, origin
