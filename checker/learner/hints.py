"""What a learner asks between checks: the next hint, the reference solution (once the lab passed)."""

from __future__ import annotations

import difflib
import textwrap

from checker.learner import progress
from checker.base.chapters import HINT_LEVELS, Chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path


class SolutionLocked(WorkbookError):
    """The lab has not passed here yet: not bad input, so exit 1."""

    exit_code = 1


def _failing_check(chapter: Chapter, entry: dict) -> str | None:
    """The failed check of the last recorded check to fix first (chapter order; a check whose hints wait on
    another failed check comes after it)."""
    return chapter.first_to_fix(entry.get("failed") or [])


def next_hint(chapter: Chapter) -> str:
    """The hint steps shown so far plus the next one, for the check the last `workbook check` failed.

    The hint is chosen by that check's evidence (chapter.toml's ``match``); a different failure starts again
    from the nudge.
    """
    number = f"{chapter.number:02d}"
    entry = progress.chapter_state(chapter.id)
    if not entry:
        return (f"{chapter.id}: no check of {display_path(chapter.lab_script)} recorded yet. Run `workbook check "
                f"{number}` (or `workbook watch {number}`) first: the hint follows what the failing check found.")
    changed = progress.lab_changed(chapter.id, entry)
    if entry.get("status") == progress.PASSED:
        if changed:
            return (f"{chapter.id}: your lab passed its check of {entry.get('date')}, but "
                    f"{display_path(chapter.lab_script)} changed since: run `workbook check {number}` again; "
                    f"the hint follows what that check finds.")
        if entry.get("every_check") is False:  # `workbook check NN --only ...`: a pass of the checks it ran
            return (f"{chapter.id}: your last check ran only some of the chapter's checks (--only), and those passed; "
                    f"run `workbook check {number}` for all of them: the hint follows what fails there.")
        return (f"{chapter.id}: your lab passed its last check; no hint needed. "
                f"`workbook solution {number}` shows the reference solution beside your lab.")
    check = _failing_check(chapter, entry)
    failed = set(entry.get("failed") or []) - {check}
    hint = chapter.hint_ladder_for(check, (entry.get("evidence") or {}).get(check, []), failed) if check else None
    if hint is None:
        raise WorkbookError(f"{chapter.id}/chapter.toml has no [[hints]] for check {check!r}; add one")
    key = f"{check}#{hint.index}"
    seen = entry.get("hint") or {}
    shown = seen.get("steps", 0) if seen.get("key") == key else 0
    shown = min(shown + 1, len(HINT_LEVELS))
    progress.update(chapter.id, hint={"key": key, "steps": shown})
    lines = [f"{chapter.id}: {check} failed in your last check ({entry.get('date')}, on {entry.get('device')})", ""]
    if changed:
        lines[-1:-1] = [f"{display_path(chapter.lab_script)} changed since that check: `workbook check {number}` "
                        f"again to see what fails now."]
    for step, (label, text) in enumerate(hint.steps[:shown], 1):
        lines.append(textwrap.fill(f"{step}/{len(HINT_LEVELS)} {label}: {text}", 100, subsequent_indent="    "))
    lines.append("")
    if shown < len(HINT_LEVELS):
        lines.append(f"`workbook hint {number}` again for the next step.")
    else:
        lines.append(f"That was the last step. Once your lab passes, `workbook solution {number}` shows the "
                     f"reference solution beside it.")
    return "\n".join(lines)


def solution_diff(chapter: Chapter, force: bool = False) -> tuple[str, str | None]:
    """(a unified diff from the learner's lab to the reference solution, a note for stderr or None).

    Only after the lab passed every check on this machine (recorded by `workbook check`), or with force.
    """
    number = f"{chapter.number:02d}"
    passed = progress.passed_here(chapter.id)
    note = None
    if passed is None:
        if not force:
            raise SolutionLocked(
                f"the solution opens once your lab passes on this machine: run `workbook check {number}` "
                f"(or `workbook watch {number}`); `workbook solution {number} --force` shows it now")
        note = (f"--force: showing the reference solution although {display_path(chapter.lab_script)} has not "
                f"passed on this machine")
    lab = chapter.lab_script.read_text().splitlines(keepends=True)
    solution = chapter.solution_script.read_text().splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(lab, solution, fromfile=f"{display_path(chapter.lab_script)} (yours)",
                                        tofile=display_path(chapter.solution_script)))
    if not diff:
        diff = f"{display_path(chapter.lab_script)} is the reference solution, line for line.\n"
    return diff, note
