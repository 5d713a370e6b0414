"""mkdocs hook: the chapters' navigation, the index table and each chapter page's heading come from
chapter.toml (checker/pages/site.py), so they are declared once."""

from checker.pages.site import nav_entries, page_markdown


def on_config(config, **kwargs):
    for item in config["nav"]:
        if isinstance(item, dict) and "Chapters" in item:
            item["Chapters"] = nav_entries()
    return config


def on_page_markdown(markdown, page, **kwargs):
    return page_markdown(page.file.src_path, markdown)
