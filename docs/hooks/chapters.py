"""mkdocs hook: the chapters' navigation, the index table and each chapter page's heading come from
chapter.toml (checker/pages/site.py), so they are declared once; the labs a page includes are the labs as
shipped, never the learner's edited copies (written to a folder of their own, read before the checkout)."""

import atexit
import logging
import shutil
import tempfile
from pathlib import Path

from checker.pages.site import nav_entries, page_markdown, write_shipped_labs

log = logging.getLogger("mkdocs.hooks.chapters")


def on_config(config, **kwargs):
    for item in config["nav"]:
        if isinstance(item, dict) and "Chapters" in item:
            item["Chapters"] = nav_entries()
    shipped = Path(tempfile.mkdtemp(prefix="workbook-shipped-labs-"))
    atexit.register(shutil.rmtree, shipped, ignore_errors=True)
    for note in write_shipped_labs(shipped):
        log.info(note)
    snippets = config["mdx_configs"].setdefault("pymdownx.snippets", {})
    snippets["base_path"] = [str(shipped), *snippets.get("base_path", ["."])]
    return config


def on_page_markdown(markdown, page, **kwargs):
    return page_markdown(page.file.src_path, markdown)
