"""The site's facts about chapters, read from each chapter.toml: the navigation, the index page's table and
each chapter page's heading. docs/hooks/chapters.py hands them to mkdocs, so none is typed in mkdocs.yml or
a page."""

from __future__ import annotations

from pathlib import Path

from checker.base.chapters import all_chapters
from checker.base.paths import display_path

TABLE_MARKER = "<!-- the chapters: generated from each chapter.toml -->"
HEADING_MARKER = "<!-- heading: generated from chapter.toml -->"


def nav_entries() -> list[dict[str, str]]:
    """mkdocs nav entries of the chapters, in order: {"01 Host syncs": "chapters/01_item_syncs.md"}."""
    return [{f"{c.number:02d} {c.short_title}": f"chapters/{c.id}.md"} for c in all_chapters()]


def chapters_table() -> str:
    rows = ["| | chapter | the slow pattern |", "|---|---|---|"]
    rows += [f"| {c.number:02d} | [{c.short_title}](chapters/{c.id}.md) | {c.summary} |" for c in all_chapters()]
    return "\n".join(rows)


def page_markdown(src_path: str, markdown: str) -> str:
    """A page's Markdown with the generated parts in place of their markers."""
    if TABLE_MARKER in markdown:
        markdown = markdown.replace(TABLE_MARKER, chapters_table())
    if HEADING_MARKER in markdown:
        chapter = next((c for c in all_chapters() if src_path == f"chapters/{c.id}.md"), None)
        if chapter is None:
            raise ValueError(f"{src_path}: a chapter heading marker on a page that is no chapter's")
        markdown = markdown.replace(HEADING_MARKER, f"# {chapter.heading}")
    return markdown


def write_shipped_labs(folder: Path) -> list[str]:
    """Write every chapter's lab folder as shipped (checker.grader.pristine) under ``folder``/labs/<id>/, for the
    pages' `--8<-- "labs/..."` includes to read before the checkout's own labs/ (docs/hooks/chapters.py puts
    ``folder`` first in the snippets' base paths): a page shows the lab as shipped, whatever the learner did to
    theirs. Returns a line for each file of which no shipped copy was found here, saying what stands in."""
    from checker.grader.pristine import side_files, write_pristine_lab

    notes = []
    for chapter in all_chapters():
        lab_folder = folder / "labs" / chapter.id
        _, origin = write_pristine_lab(chapter, lab_folder)
        if origin == display_path(chapter.slow_script):
            notes.append(f"{display_path(chapter.lab_script)} was edited and no git history holds the shipped one: "
                         f"the pages show {origin}, the same code without the lab's comments")
        for name in side_files(chapter):
            if not (lab_folder / name).is_file():
                notes.append(f"labs/{chapter.id}/{name} holds the learner's work and no git history holds the shipped "
                             "one: the pages show the learner's")
    return notes
