"""`workbook watch [CHAPTER]`: check the lab each time it is saved; on a pass, go on to the next chapter.

The lab is only read, never written. Ctrl-C stops the watch (and a check in progress) cleanly.
"""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Callable

from checker.learner import progress
from checker.base.chapters import Chapter, all_chapters, get_chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path


def first_unfinished() -> Chapter:
    """The first chapter whose lab has not passed (the first chapter when every one has)."""
    chapters = all_chapters()
    for chapter in chapters:
        if progress.chapter_state(chapter.id).get("status") != progress.PASSED:
            return chapter
    return chapters[0]


def _next_after(chapter: Chapter) -> Chapter | None:
    later = [c for c in all_chapters() if c.number > chapter.number]
    return next((c for c in later if progress.chapter_state(c.id).get("status") != progress.PASSED), None)


def _saves(lab: Path):
    """Yield each time the lab file is written (editors that save by renaming a new file over it included)."""
    from watchfiles import watch

    def is_lab(_change, path: str) -> bool:
        return Path(path).name == lab.name

    for _changes in watch(lab.parent, watch_filter=is_lab, recursive=False, debounce=400):
        if lab.is_file():  # between an editor's delete and its rename there may be no file for a moment
            yield


def watch_labs(key: str | None, check_once: Callable[[Chapter], bool], say: Callable[[str], None] = print) -> int:
    """Check the chapter's lab now and after every save; when it passes, move to the next unfinished chapter.

    ``check_once`` runs one check of the lab and prints it; it returns True when the lab passed.
    """
    chapter = get_chapter(key) if key else first_unfinished()
    try:
        while chapter is not None:
            lab = chapter.lab_script
            if not lab.is_file():
                raise WorkbookError(f"{display_path(lab)}: no such file; restore it with `git checkout -- {display_path(lab)}`")
            say(f"== {chapter.id}: {chapter.title}")
            passed = _check(chapter, check_once, say)
            if not passed:
                say(f"-- watching {display_path(lab)}: save it to check again (Ctrl-C to stop)")
                for _ in _saves(lab):
                    say(f"\n== {_dt.datetime.now():%H:%M:%S} {display_path(lab)} saved")
                    if _check(chapter, check_once, say):
                        break
            upcoming = _next_after(chapter)
            if upcoming is None:
                say(f"\n{chapter.id} passed, and so has every chapter: `workbook list` shows them. Well done.")
                return 0
            say(f"\n{chapter.id} passed. Next: {upcoming.id} ({display_path(upcoming.lab_script)}); "
                f"read docs/chapters/{upcoming.id}.md first.\n")
            chapter = upcoming
    except KeyboardInterrupt:
        print("\nworkbook watch: stopped; your lab is as you last saved it", file=sys.stderr)
        return 130
    return 0


def _check(chapter: Chapter, check_once, say) -> bool:
    try:
        return check_once(chapter)
    except WorkbookError as err:  # a lab that does not compile, crashes or hangs: say so and keep watching
        say(f"workbook: {err}")
        return False
