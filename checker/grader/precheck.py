"""Before anything runs: which script is graded (a variant of the chapter, or the lab file in a submission folder),
and does it compile? A syntax error is reported in about a second, as the compiler sees it (file:line:col, the
line, a caret), instead of after the baseline's timed run."""

from __future__ import annotations

import ast
import errno
import os
from pathlib import Path

from checker.base.chapters import Chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path
from checker.base.scan import declared_encoding


class ScriptSyntaxError(WorkbookError):
    """The script does not compile: the message is the place, the line and a caret under the fault."""

    @property
    def headline(self) -> str:
        """The message's first line, file:line:col: Kind: what (a gradebook's reason, one line)."""
        return str(self).splitlines()[0]


def _caret(line: str, start: int, end: int | None) -> str:
    """Spaces (tabs kept, so the caret lines up) up to column ``start`` (1-based), then ^ to ``end``."""
    start = max(1, min(start, len(line) + 1))
    width = max(1, (end - start) if end and end > start else 1)
    width = min(width, max(1, len(line) + 1 - start))
    prefix = "".join(c if c == "\t" else " " for c in line[:start - 1])
    return prefix + "^" * width


def _source(script: Path) -> str:
    where = display_path(script)
    try:
        data = Path(script).read_bytes()
        if encoding := declared_encoding(data):  # Python would decode it so, and run other text than this reads
            raise ScriptSyntaxError(f"{where}: declares its source encoding as {encoding}; a lab is UTF-8 text "
                                    "(remove the coding line and save it as UTF-8)")
        return data.decode("utf-8")
    except FileNotFoundError:
        raise WorkbookError(f"{where}: no such file") from None
    except UnicodeDecodeError as err:
        raise ScriptSyntaxError(f"{where}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None


def check_candidate(script: Path, chapter_id: str) -> None:
    """Before a check or a grading runs anything: the script compiles (check_syntax) and starts this chapter's
    workload (check_chapter), read once."""
    source = _source(script)
    check_syntax(script, source)
    check_chapter(script, chapter_id, source)


def check_syntax(script: Path, source: str | None = None) -> None:
    """Raise ScriptSyntaxError when ``script`` does not compile; nothing is run or imported."""
    where = display_path(script)
    if source is None:
        source = _source(script)
    if "\0" in source:  # the compiler says "null bytes" at line 1 (or no line): find the real one
        at = source.index("\0")
        lineno = source.count("\n", 0, at) + 1
        column = at - (source.rfind("\n", 0, at) + 1) + 1
        line = source.split("\n")[lineno - 1]
        shown = "".join(c if c.isprintable() or c == "\t" else "?" for c in line.rstrip())
        raise ScriptSyntaxError("\n".join([f"{where}:{lineno}:{column}: SyntaxError: source code cannot contain "
                                           "null bytes (a \\0 here)", "    " + shown,
                                           "    " + _caret(shown, column, None),
                                           "remove it and save; nothing was run"]))
    try:
        compile(source, str(script), "exec", dont_inherit=True)
    except SyntaxError as err:  # IndentationError and TabError are SyntaxErrors
        lineno = err.lineno or 1
        lines = source.splitlines()
        line = lines[lineno - 1] if 0 < lineno <= len(lines) else (err.text or "").rstrip("\n")
        column = err.offset or 1
        end = err.end_offset if (err.end_lineno or lineno) == lineno else None
        message = f"{where}:{lineno}:{column}: {type(err).__name__}: {err.msg}"
        shown = "".join(c if c.isprintable() or c == "\t" else "?" for c in line.rstrip())  # no NUL to a terminal
        raise ScriptSyntaxError("\n".join([message, "    " + shown, "    " + _caret(shown, column, end),
                                           "fix that line and save; nothing was run"])) from None
    except ValueError as err:  # e.g. "source code string cannot contain null bytes"
        raise ScriptSyntaxError(f"{where}: cannot be compiled: {err}") from None


def check_chapter(script: Path, chapter_id: str, source: str | None = None) -> None:
    """Raise WorkbookError when the script starts another chapter's workload (``start("01_item_syncs")`` graded as
    chapter 00): every chapter's lab is called train.py, so a submission filed under the wrong chapter would
    otherwise run and fail on weights that "do not fit the model". Only a literal chapter id is read; a script
    that computes it is left to the run."""
    try:
        tree = ast.parse(_source(script) if source is None else source)
    except (WorkbookError, SyntaxError, ValueError):
        return  # check_syntax says what is wrong
    started = {node.args[0].value for node in ast.walk(tree)
               if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
               and isinstance(node.args[0].value, str)
               and (getattr(node.func, "id", None) == "start" or getattr(node.func, "attr", None) == "start")}
    others = sorted(name for name in started if name != chapter_id and name[:2].isdigit() and name[2:3] == "_")
    if others and chapter_id not in started:
        number = others[0][:2]
        raise WorkbookError(f"{display_path(script)}: starts chapter {number}'s workload (start({others[0]!r})), not "
                            f"chapter {chapter_id[:2]}'s: is it chapter {number}'s lab? Grade it as chapter {number} "
                            f"(workbook check {number} / workbook grade {number})")


def candidate_paths(chapter: Chapter, submission: Path) -> list[Path]:
    """Where a submission folder may hold the lab file, in the order the grader looks."""
    return [submission / chapter.lab_file, submission / chapter.id / chapter.lab_file,
            submission / "labs" / chapter.id / chapter.lab_file]


def resolve_candidate(chapter: Chapter, variant: str = "lab", submission: Path | None = None) -> Path:
    """The script to grade: a variant of the chapter, or the lab file inside a submission folder."""
    if submission is None:
        return chapter.script_for(variant)
    given = Path(submission).expanduser()
    try:
        submission = given.resolve()  # relative to where the command was given
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError on a symlink loop
        raise WorkbookError(f"--submission {given}: is a symlink loop and cannot be resolved; "
                            "name the folder itself") from None
    if not submission.is_dir():
        if given.is_symlink() and not submission.exists():
            raise WorkbookError(f"--submission {given}: is a symlink to {submission}, which does not exist; "
                                "name the folder itself")
        raise WorkbookError(f"--submission {submission}: "
                            + ("is a file, not a folder; name the folder that holds the lab" if submission.exists()
                               else "does not exist; check the path"))
    tried = candidate_paths(chapter, submission)
    for path in tried:
        if path.is_file():
            return path
    for path in tried:  # there, but not a file to read: say what it is, not "rename train.py to train.py"
        problem = _not_a_file(path)
        if problem:
            raise WorkbookError(f"--submission {submission}: {path.relative_to(submission)} {problem}")
    found = sorted(str(p.relative_to(submission)) for p in submission.rglob("*.py"))[:5]
    near = [name for name in found if Path(name).name.lower() == chapter.lab_file.lower()]
    raise WorkbookError(f"--submission {submission}: no {chapter.lab_file} in it (looked in "
                        + ", ".join(str(p.relative_to(submission)) for p in tried) + "); "
                        + (f"found {', '.join(found)}" if found else "it holds no .py file")
                        + (f": rename {near[0]} to {chapter.lab_file} (names are case-sensitive)" if near else ""))


def _not_a_file(path: Path) -> str | None:
    """What is at ``path`` when something is there that is not a file to read (None: nothing is there)."""
    try:
        path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            return f"is a symlink to {os.readlink(path)}, which does not exist; put the lab file itself there"
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop and cannot be resolved; put the lab file itself there"
        return f"cannot be read ({exc.strerror})"
    if path.is_dir():
        return "is a folder, not a file; the lab must be a file of that name"
    return None if path.is_file() else "is not a regular file (a FIFO, a socket or a device); put the lab file there"
