"""The docs site builds strictly, and every measured number on it comes from a committed results file."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checker.chapters import all_chapters
from checker.results import render_markdown

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"


def test_mkdocs_build_strict(tmp_path):
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-m", "mkdocs", "--version"],
                                                         capture_output=True).returncode != 0:
        pytest.fail("mkdocs is not installed: pip install -e '.[dev]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("chapter", all_chapters(), ids=lambda c: c.id)
def test_results_markdown_is_rendered_from_its_results_file(chapter):
    """The .md a page includes must be exactly what the results .json renders to: no hand-typed numbers."""
    source = RESULTS / f"{chapter.id}.json"
    page_block = RESULTS / f"{chapter.id}.md"
    assert source.is_file(), f"no GPU results for {chapter.id}: run scripts/gpu_verify.sh on a GPU and copy them"
    results = json.loads(source.read_text())
    for key in ("gpu", "driver", "torch", "date"):
        assert results.get(key), f"{source} lacks {key}"
    assert page_block.read_text() == render_markdown(results)


@pytest.mark.parametrize("chapter", all_chapters(), ids=lambda c: c.id)
def test_gpu_results_show_the_lesson(chapter):
    """On the GPU run, the solution passed and the lab failed, with every trace tool."""
    results = json.loads((RESULTS / f"{chapter.id}.json").read_text())
    by = {(r["variant"], r["trace_tool"]): r for r in results["runs"]}
    for tool in ("torch", "nsys"):
        assert by[("solution", tool)]["passed"] is True, f"{chapter.id}: solution with {tool}"
        assert by[("lab", tool)]["passed"] is False, f"{chapter.id}: lab with {tool}"
