"""The labs as shipped, whatever the learner has done to their copy in labs/.

The workbook's own tests grade the unmodified labs (they must fail) and read their lines; they must never
grade the learner's edits, or fixing a lab would turn `python3 -m pytest` red. A lab as shipped is the slow
script's code with TODO comments (tests/test_chapters.py holds the two to that), so it is recognised by its
code: the working copy when it is still the slow script's code, else the newest committed version that is.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

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


def shipped_lab(chapter: Chapter) -> tuple[str, str] | None:
    """(text, where it came from) of the chapter's lab as shipped, or None when no copy of it can be found.

    The working copy counts when its code is the slow script's; otherwise git's history of the lab file is
    searched, newest first, for a version that is. None: the lab was edited and this checkout has no history
    holding the shipped version (a download without .git, or the slow script changed without the lab).
    """
    slow = code_of(chapter.slow_script.read_text())
    working = chapter.lab_script.read_text() if chapter.lab_script.is_file() else ""
    if code_of(working) == slow:
        return working, str(chapter.lab_script.relative_to(repo_root()))
    relative = chapter.lab_script.relative_to(repo_root()).as_posix()
    revisions = _git("log", "--format=%H", "--", relative)
    for revision in (revisions or "").split():
        text = _git("show", f"{revision}:{relative}")
        if text is not None and code_of(text) == slow:
            return text, f"git {revision[:10]}:{relative}"
    return None


def has_git_history() -> bool:
    return _git("rev-parse", "--git-dir") is not None


def write_pristine_lab(chapter: Chapter, folder: Path) -> tuple[Path, str]:
    """Write the lab as shipped into ``folder`` (as a submission folder) and say where it came from.

    When no shipped copy is found, the slow script stands in: it is the same code, so it earns the same verdicts.
    """
    found = shipped_lab(chapter)
    text, origin = found if found else (chapter.slow_script.read_text(),
                                        str(chapter.slow_script.relative_to(repo_root())))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / chapter.lab_file
    path.write_text(text)
    return path, origin
