"""The site's facts about chapters, read from each chapter.toml: the navigation, the index page's table and
each chapter page's heading. docs/hooks/chapters.py hands them to mkdocs, so none is typed in mkdocs.yml or
a page."""

from __future__ import annotations

from checker.base.chapters import all_chapters

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
