"""The docs site builds strictly, and every measured number on it comes from a committed results file."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checker.base.chapters import all_chapters
from checker.base.errors import WorkbookError
from checker.pages.results import headline, lesson_status, render_markdown

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"


def load_script(relative: str):
    """A script of the checkout (``scripts/...``, a chapter's) imported as a module, to call its functions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(relative).stem, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mkdocs_build_strict(tmp_path):
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-m", "mkdocs", "--version"],
                                                         capture_output=True).returncode != 0:
        pytest.fail("mkdocs is not installed: pip install -e '.[dev]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the site works offline: no page loads a script, a stylesheet, a font or an image from another host
    import re

    outside = re.compile(r"<(?:script|link|img|source|iframe)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.I)
    fonts = re.compile(r"fonts\.(?:googleapis|gstatic)\.com", re.I)
    for page in (tmp_path / "site").rglob("*"):
        if page.suffix in (".html", ".css", ".js"):
            text = page.read_text(errors="replace")
            hits = outside.findall(text) if page.suffix == ".html" else []
            assert not hits and not fonts.search(text), f"{page.relative_to(tmp_path)} requests an outside host: {hits[:3]}"
    broken = _links_the_site_lacks(tmp_path / "site")
    assert not broken, ("pages link to what the built site leaves out (docs/results/ and docs/snippets/ are not "
                        "pages: name such a file as `docs/results/...`, or build it as a page): " + "; ".join(broken[:10]))


def _links_the_site_lacks(site):
    """Every link of a built page to a place on the site (relative, or from the site's root) whose target the
    build did not write: `page -> link`."""
    import re
    from urllib.parse import unquote, urlsplit

    broken = []
    for page in sorted(site.rglob("*.html")):
        for href in re.findall(r"<a\b[^>]*\bhref=\"([^\"]*)\"", page.read_text(errors="replace")):
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # another host, mailto:, or a place on the same page
            path = unquote(parts.path)
            target = (site / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
            target = target.resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)} -> {href}")
    return broken


def test_a_link_to_a_file_the_site_leaves_out_is_found(tmp_path):
    """The link check above reads the built pages: a link to an excluded results file is caught, one to a page is not."""
    (tmp_path / "chapters" / "a").mkdir(parents=True)
    (tmp_path / "chapters" / "a" / "index.html").write_text(
        '<a href="../../results/probe/">probe</a> <a href="../b/#x">b</a> <a href="/">home</a> '
        '<a href="https://example.org/">out</a> <a href="#top">top</a>')
    (tmp_path / "chapters" / "b").mkdir()
    (tmp_path / "chapters" / "b" / "index.html").write_text("")
    (tmp_path / "index.html").write_text("")
    assert _links_the_site_lacks(tmp_path) == ["chapters/a/index.html -> ../../results/probe/"]


def test_repo_url_comes_from_the_environment_and_asks_no_outside_host(tmp_path):
    """WORKBOOK_REPO_URL sets the repository link; the theme's request for a GitHub repository's stars and forks
    (api.github.com, on every page) is left out by overrides/partials/source.html, so the site stays offline."""
    import os

    url = "https://github.com/example-owner/example-repo"  # a stand-in: the workbook's own address is not known here
    env = {**os.environ, "WORKBOOK_REPO_URL": url}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "site" / "index.html").read_text()
    assert f'<a href="{url}" title="Go to repository" class="md-source">' in page
    assert 'data-md-component="source"' not in page  # the theme's script fetches the repository's facts for this


def test_site_in_headless_chromium_has_no_sideways_scroll_and_legible_linked_timelines(tmp_path):
    """scripts/check_pages.py: every page at 1366 and 390 px wide, in headless Chromium (skipped, saying so,
    where there is none)."""
    if not any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("needs chromium (Debian: apt-get install chromium); this machine has none")
    out = tmp_path / "pages.md"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_pages.py"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    table = out.read_text()
    assert table.count("| 1366 |") == table.count("| 390 |") >= 8  # every page, both widths
    assert table.count("linked") >= 2 * 5  # the five timelines, at both widths


def test_page_snippets_are_generated_from_the_chapters():
    """The hints and the fix a page shows are what scripts/make_page_snippets.py makes of chapter.toml and the
    labs now; the command outputs a page shows were written by a real run of it."""
    from checker.grader.pristine import shipped_lab

    module = load_script("scripts/make_page_snippets.py")
    # a fix is shown from the lab as shipped: where only the learner's copy is here (a download without .git), the
    # slow script stands in and its diff is not the committed one
    unknown = {f"{c.id}-fix.diff" for c in all_chapters() if shipped_lab(c) is None}
    for path, text in module.static_snippets().items():
        if path.name not in unknown:
            assert path.is_file() and path.read_text() == text, f"run python scripts/make_page_snippets.py ({path.name} is stale)"
    for chapter in all_chapters():
        page = chapter.docs_page.read_text()
        for variant in ("lab", "solution"):
            output = ROOT / "docs" / "snippets" / f"{chapter.id}-check-cpu-{variant}.txt"
            assert output.is_file(), f"run python scripts/make_page_snippets.py --outputs ({output.name} is missing)"
            stamp, command = output.read_text().splitlines()[:2]
            assert stamp.startswith("# a real run on ") and command.startswith(f"$ workbook check {chapter.number:02d}")
            assert f'"docs/snippets/{output.name}"' in page
        for kind in ("hints.md", "fix.diff"):
            assert f'"docs/snippets/{chapter.id}-{kind}"' in page, f"{chapter.docs_page} must include its {kind}"
        assert "solutions/" not in page.split("??? success")[0].split("## Fix it")[1], \
            "the solution must be folded: only inside the collapsed '??? success' block"
    if unknown:
        pytest.skip(f"{', '.join(sorted(unknown))} not compared: the labs they show were edited and this checkout has no "
                    "git history holding the shipped ones")


@pytest.mark.parametrize("chapter", all_chapters(), ids=lambda c: c.id)
def test_results_markdown_is_rendered_from_its_results_file(chapter):
    """The block a page includes must be exactly what the results .json renders to: no hand-typed numbers."""
    source = RESULTS / f"{chapter.id}.json"
    assert source.is_file(), f"add {source} (scripts/summarize_gpu_run.py writes it; empty_results() when none)"
    results = json.loads(source.read_text())
    for kind in results["kinds"]:  # one entry per GPU kind measured, each stamped with where and when
        for key in ("gpu", "driver", "torch", "date", "kind"):
            assert kind.get(key), f"{source} lacks {key}"
    assert len({k["kind"] for k in results["kinds"]}) == len(results["kinds"]), f"{source}: one entry per GPU kind"
    assert (RESULTS / f"{chapter.id}.md").read_text() == render_markdown(results)
    page = chapter.docs_page.read_text()
    assert f'--8<-- "docs/results/{chapter.id}.md"' in page, f"{chapter.docs_page} must include its results block"


def _run(variant, tool, passed):
    return {"variant": variant, "trace_tool": tool, "passed": passed, "checks": {}, "wall_s": 1.0}


def test_lesson_is_confirmed_only_when_solution_passes_and_lab_fails_with_both_tools():
    complete = [_run(v, t, v == "solution") for v in ("solution", "lab") for t in ("torch", "nsys")]
    assert lesson_status(complete) is None
    assert "the solution failed with nsys" in lesson_status(
        [r if (r["variant"], r["trace_tool"]) != ("solution", "nsys") else _run("solution", "nsys", False) for r in complete])
    assert "not run: lab with nsys" in lesson_status(complete[:3])
    torch_only = [r for r in complete if r["trace_tool"] == "torch"]
    assert lesson_status(torch_only, ("torch",)) is None and "not run" in lesson_status(torch_only)


def test_a_chapter_not_graded_with_nsys_says_why_and_owes_no_nsys_run():
    """Chapter 09's checks read what only torch.profiler records: its page says so instead of asking for nsys runs,
    and a check with nsys is refused in one line, on any machine, before anything runs."""
    from checker.base.chapters import get_chapter
    from checker.grader.evaluate import refuse_trace_tool

    chapter = get_chapter("09")
    assert chapter.trace_tools == ("torch",) and "nsys" in chapter.not_graded_with
    runs = [_run(v, "torch", v == "solution") for v in ("solution", "lab")]
    results = {"chapter": chapter.id, "gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1,
               "date": "2026-01-01", "runs": runs, "headline": headline(runs)}
    page = render_markdown(results)
    assert "GPU verification incomplete" not in page
    assert f"graded with torch.profiler only, not nsys: {chapter.not_graded_with['nsys']}" in page
    for device in ("cpu", "cuda", None):
        with pytest.raises(WorkbookError, match="graded from torch.profiler's traces only"):
            refuse_trace_tool(chapter, "nsys", device)
    assert get_chapter("01").trace_tools == ("torch", "nsys")


def test_incomplete_verification_is_flagged_on_the_page():
    results = {"gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1, "date": "2026-01-01",
               "runs": [_run("solution", "torch", False)], "headline": headline([_run("solution", "torch", False)])}
    assert render_markdown(results).startswith('!!! warning "GPU verification incomplete"')


@pytest.mark.parametrize("chapter", all_chapters(), ids=lambda c: c.id)
def test_thresholds_quoted_on_a_page_are_the_chapters_own(chapter):
    """A page that says "at least **3×**" must say what chapter.toml declares, on some device."""
    import re

    declared = {float(v) for spec in chapter.checks for v in spec.threshold.values() if isinstance(v, (int, float))}
    quoted = {float(n) for n in re.findall(r"\*\*(\d+(?:\.\d+)?)×\*\*", chapter.docs_page.read_text())}
    assert quoted <= declared, f"{chapter.docs_page} quotes {sorted(quoted - declared)}x; chapter.toml declares {sorted(declared)}"


@pytest.mark.parametrize("spec_file", sorted(RESULTS.glob("*-sweep.json")), ids=lambda p: p.stem)
def test_sweep_tables_are_rendered_from_their_raw_rows(spec_file):
    """A sweep table on a page is exactly what its raw rows render to, and some page includes it."""
    from checker.pages.results import render_sweep

    spec = json.loads(spec_file.read_text())
    markdown = spec_file.with_suffix(".md")
    assert markdown.read_text() == render_sweep(spec, ROOT)
    assert "| `" in markdown.read_text(), f"{spec['source']} has no rows for {spec['chapter']}"
    pages = [p for p in (ROOT / "docs" / "chapters").glob("*.md") if f'"docs/results/{markdown.name}"' in p.read_text()]
    assert pages, f"no chapter page includes docs/results/{markdown.name}"


def _row(variant, tool, checks, passed, **extra):
    return {"chapter": "05_pointwise_chains", "variant": variant, "trace_tool": tool, "passed": passed,
            "checks": checks, "rerun": 1, "wall_s_outer": 1.0, **extra}


def _check(name, status, threshold=None, reason=None, **measured):
    return {"name": name, "status": status, "threshold": threshold, "reason": reason, "measured": measured}


def test_results_mark_checks_judged_against_an_older_threshold_and_drop_unselected_ones():
    from checker.pages.results import build_results

    env = {"gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1, "date": "2026-01-01"}
    rows = [
        _row("solution", "torch", [_check("throughput", "passed", 1.7, speedup=3.0, speedup_min=2.9, speedup_max=3.1,
                                          baseline_samples_per_s=1.0, candidate_samples_per_s=3.0),
                                   _check("elementwise_kernels", "failed", 2.0, elementwise_fewer_by=1.49)], False),
        _row("solution", "torch", [_check("throughput", "skipped", 1.7, reason="not selected (--only elementwise_kernels)"),
                                   _check("elementwise_kernels", "passed", 1.3, elementwise_fewer_by=1.49)], True,
             only="elementwise_kernels"),
    ]
    results = build_results(env, rows, "05_pointwise_chains", {"throughput": 1.7, "elementwise_kernels": 1.3})
    first, second = results["runs"]
    assert first["checks"]["elementwise_kernels"]["status"] == "stale"
    assert first["passed"] is True  # its other checks passed; the stale one is not a verdict
    assert "throughput" not in second["checks"]  # left out by --only, so not shown as skipped
    assert results["headline"]["verdicts_stable"] is True  # different selections are not reruns of each other
    table = render_markdown(results)
    assert "pass/stale (older threshold) · 1.5x fewer" in table and "pass · 3.00x" in table


def test_each_ncu_measurement_says_what_it_was_judged_against():
    from checker.pages.results import build_results

    env = {"gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1, "date": "2026-01-01"}
    ncu = dict(kernel="triton_per_fused_x", grid="(8, 1, 1)", duration_us=100.0, dram_gbytes_per_s=3000.0,
               fraction_of_copy=0.75, copy_gbytes_per_s=4000.0, memory_throughput_pct_of_peak=68.0,
               sm_throughput_pct_of_peak=55.0)
    rows = [_row("solution", "torch", [_check("ncu_dram", "passed", 0.85, **ncu)], True, with_ncu=True),
            _row("solution", "torch", [_check("ncu_dram", "passed", 0.7, **ncu)], True, with_ncu=True),
            _row("lab", "torch", [_check("ncu_dram", "failed", 0.7, **ncu)], False, with_ncu=True),
            _row("solution", "torch", [_check("ncu_dram", "skipped", 0.7, reason="not selected")], True)]
    markdown = render_markdown(build_results(env, rows, "05_pointwise_chains", {"ncu_dram": 0.7}))
    lines = [line for line in markdown.splitlines() if line.startswith("- Nsight Compute")]
    assert [line.rpartition("; ")[2] for line in lines] == [
        "judged against an older line (85% of the copy), not counted", "passed against 70% of the copy",
        "the lab's \"before\", not a verdict"]
    assert "| pass/stale (older threshold) · 75% of copy bandwidth |" in markdown  # the skipped run says nothing
    assert "| measured (the before, not a verdict) · 75% of copy bandwidth |" in markdown  # the lab's, no "fail"


def test_a_check_no_run_asked_for_says_why_in_its_cell():
    """Nsight Compute runs only when asked: a column of runs that all skipped it says so, not a bare "skipped"."""
    from checker.pages.results import build_results

    env = {"gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1, "date": "2026-01-01"}
    why = "runs only when asked: workbook check 05 --with-ncu (a minute or two)"
    rows = [_row("solution", "torch", [_check("ncu_dram", "skipped", 0.7, reason=why)], True),
            _row("lab", "torch", [_check("ncu_dram", "skipped", 0.7, reason=why)], False)]
    markdown = render_markdown(build_results(env, rows, "05_pointwise_chains", {"ncu_dram": 0.7}))
    assert "| ncu_dram | skipped (runs only when asked) | skipped (runs only when asked) |" in markdown


def test_results_files_are_rebuilt_from_the_raw_rows_they_claim():
    """Every GPU results file is exactly what evidence/history/assembly.json builds from raw gpu_verify rows:
    no number in one can be typed by hand, and a threshold changed since is marked, not silently re-judged."""
    from checker.pages.results import assemble_manifest

    rebuilt = assemble_manifest(ROOT / "evidence" / "history" / "assembly.json")
    from checker.base.chapters import all_chapters

    committed = {c.id: json.loads((RESULTS / f"{c.id}.json").read_text()) for c in all_chapters()}
    committed = {chapter_id: results for chapter_id, results in committed.items() if results["kinds"]}
    assert sorted(rebuilt) == sorted(committed)
    for chapter_id, results in rebuilt.items():
        assert results == committed[chapter_id], f"docs/results/{chapter_id}.json differs from what its rows build"


def test_dropping_a_row_that_does_not_exist_is_an_error(tmp_path):
    from checker.pages.results import read_rows

    rows = tmp_path / "checks.jsonl"
    rows.write_text(json.dumps(_row("solution", "torch", [], True)) + "\n")
    assert read_rows([rows], ["checks.jsonl#1"]) == []
    with pytest.raises(ValueError, match="checks.jsonl#2"):
        read_rows([rows], ["checks.jsonl#2"])


def test_a_superseded_chapter_counts_only_the_rows_from_its_named_file_on(tmp_path):
    """A chapter whose workload changed keeps its old rows in history, but its results come from the rows measured
    after: the old failing row no longer shows, the other chapters' rows in the old file still count, and a name
    that matches nothing is an error, not a silent no-op."""
    from checker.base.errors import WorkbookError
    from checker.pages.results import assemble_manifest

    env = {"gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1, "date": "2026-01-02"}
    (tmp_path / "env.json").write_text(json.dumps(env))
    old_fail = _row("solution", "torch", [_check("same_work", "failed", 0.1)], False)
    other = {**_row("solution", "torch", [_check("same_work", "passed", 0.1)], True), "chapter": "04_eager_microops"}
    new_pass = _row("solution", "torch", [_check("same_work", "passed", 0.1)], True)
    (tmp_path / "2026-01-01-a.jsonl").write_text(json.dumps(old_fail) + "\n" + json.dumps(other) + "\n")
    (tmp_path / "2026-01-02-b.jsonl").write_text(json.dumps(new_pass) + "\n")
    kind = {"env": "env.json", "rows": ["2026-01-01-a.jsonl", "2026-01-02-b.jsonl"]}

    def build(**extra):
        (tmp_path / "assembly.json").write_text(json.dumps({"kinds": [{**kind, **extra}]}))
        return assemble_manifest(tmp_path / "assembly.json")

    def verdicts(built, chapter_id):
        head = built[chapter_id]["kinds"][0]["headline"]
        return head["solution_runs_passed"], head["solution_runs"]

    assert verdicts(build(), "05_pointwise_chains") == (1, 2)
    since = {"from": "2026-01-02-b.jsonl", "why": "a new learning rate"}
    built = build(superseded={"05": since})
    assert verdicts(built, "05_pointwise_chains") == (1, 1)
    assert verdicts(built, "04_eager_microops") == (1, 1)
    with pytest.raises(ValueError, match="c.jsonl"):
        build(superseded={"05": {**since, "from": "2026-01-02-c.jsonl"}})
    with pytest.raises(WorkbookError, match="unknown chapter"):
        build(superseded={"55": since})
    # no run of the current code on this kind yet: none of the chapter's rows count, the other chapters' still do
    built = build(superseded={"05": {"from": None, "why": "its checks changed"}})
    assert "05_pointwise_chains" not in built and verdicts(built, "04_eager_microops") == (1, 1)


def test_verdicts_are_counted_per_variant_over_every_run():
    """Every run of `workbook check` is a verdict, whatever its tool or --only; a run judged in part against an
    older threshold and an ncu measurement of the lab are not counted; one lab pass makes the verdicts unstable."""
    from checker.pages.results import build_results

    env = {"gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1, "date": "2026-01-01"}
    fast = _check("throughput", "passed", 1.7, speedup=3.0, speedup_min=2.9, speedup_max=3.1,
                  baseline_samples_per_s=1.0, candidate_samples_per_s=3.0)
    rows = [
        _row("solution", "torch", [fast], True),
        _row("solution", "nsys", [{**fast, "measured": {**fast["measured"], "speedup": 2.5}}], True),
        _row("solution", "torch", [_check("elementwise_kernels", "passed", 2.0, elementwise_fewer_by=2.1)], True),
        _row("lab", "torch", [_check("elementwise_kernels", "failed", 1.3, elementwise_fewer_by=1.0)], False,
             only="elementwise_kernels"),
        _row("lab", "torch", [_check("ncu_dram", "passed", 0.70, fraction_of_copy=0.99)], True, with_ncu=True),
    ]
    thresholds = {"throughput": 1.7, "elementwise_kernels": 1.3, "ncu_dram": 0.70}
    head = build_results(env, rows, "05_pointwise_chains", thresholds)["headline"]
    assert (head["solution_runs"], head["solution_runs_passed"], head["solution_runs_nsys"]) == (2, 2, 1)
    assert (head["lab_runs"], head["lab_runs_passed"], head["lab_runs_full"]) == (1, 0, 0)
    assert head["runs_not_counted"] == 1 and head["verdicts_stable"] is True
    assert (head["solution_speedup_runs_min"], head["solution_speedup_runs_max"]) == (2.5, 3.0)
    markdown = render_markdown(build_results(env, rows, "05_pointwise_chains", thresholds))
    assert "the solution passed **2 of 2** (1 with nsys" in markdown and "lab failed **1 of 1**" in markdown
    assert "runs ranged 2.50x to 3.00x" in markdown

    rows.append(_row("lab", "nsys", [_check("elementwise_kernels", "passed", 1.3, elementwise_fewer_by=1.5)], True))
    assert build_results(env, rows, "05_pointwise_chains", thresholds)["headline"]["verdicts_stable"] is False


def test_step_time_jitter_of_each_solution_run_is_shown():
    from checker.pages.results import build_results

    env = {"gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1, "date": "2026-01-01"}
    wait = _check("data_wait", "passed", 0.15, data_wait_fraction=0.01,
                  candidate_step_ms={"p50": 14.2, "p90": 23.8, "max": 316.1, "mean": 22.7, "steps": 136},
                  baseline_step_ms={"p50": 176.3, "p90": 204.9, "max": 233.7, "mean": 175.7, "steps": 136})
    markdown = render_markdown(build_results(env, [_row("solution", "torch", [wait], True)], "05_pointwise_chains"))
    assert "solution 14.2 / 23.8 / 316.1; slow script 176.3 / 204.9 / 233.7" in markdown


def test_an_ncu_run_of_the_lab_is_a_measurement_not_a_verdict():
    runs = [_run(v, t, v == "solution") for v in ("solution", "lab") for t in ("torch", "nsys")]
    runs.append({**_run("lab", "torch", True), "with_ncu": True})
    assert lesson_status(runs) is None
    runs.append({**_run("solution", "torch", False), "with_ncu": True,
                 "checks": {"ncu_dram": {"status": "failed", "measured": {}}}})
    assert lesson_status(runs) == "the solution failed with torch.profiler (ncu_dram)"


_TABLE_SCRIPTS = {"jitter": "scripts/jitter_results.py",
                  "prefetch": "scripts/stretch_results.py"}


@pytest.mark.parametrize("source", sorted(p for kind in _TABLE_SCRIPTS for p in RESULTS.glob(f"*-{kind}*.json")),
                         ids=lambda p: p.stem)
def test_measured_tables_are_rendered_from_their_runs(source):
    """Chapter 02's prefetcher table and chapter 03's jitter tables are what their recorded runs render to."""
    module = load_script(next(path for kind, path in _TABLE_SCRIPTS.items() if f"-{kind}" in source.stem))
    data = json.loads(source.read_text())
    rows = data.pop("rows")
    assert source.with_suffix(".md").read_text() == module.render(data, rows)


def test_chapter_titles_are_declared_once_in_chapter_toml():
    """The navigation, the index table and each page's heading come from chapter.toml (docs/hooks/chapters.py):
    none of them is typed in mkdocs.yml or a page."""
    from checker.base.chapters import all_chapters
    from checker.pages.site import HEADING_MARKER, TABLE_MARKER, chapters_table, nav_entries, page_markdown

    mkdocs_yml = (ROOT / "mkdocs.yml").read_text()
    index = (ROOT / "docs" / "index.md").read_text()
    assert TABLE_MARKER in index
    for chapter in all_chapters():
        assert chapter.summary, f"chapters/{chapter.id}/chapter.toml: add summary = \"...\" (the index table's pattern)"
        assert chapter.short_title not in mkdocs_yml and chapter.title not in index
        page = chapter.docs_page.read_text()
        assert page.startswith(HEADING_MARKER + "\n") and "\n# " not in page, chapter.docs_page
        assert page_markdown(f"chapters/{chapter.id}.md", page).startswith(f"# {chapter.heading}\n")
        assert {f"{chapter.number:02d} {chapter.short_title}": f"chapters/{chapter.id}.md"} in nav_entries()
        assert f"[{chapter.short_title}](chapters/{chapter.id}.md) | {chapter.summary} |" in chapters_table()


@pytest.mark.parametrize("table", sorted((ROOT / "evidence" / "results").glob("check-phases-*.json")), ids=lambda p: p.stem)
def test_phase_tables_are_rendered_from_their_rows(table):
    """evidence/results/check-phases-*.md is what scripts/phase_table.py renders from the .json beside it."""
    module = load_script("scripts/phase_table.py")
    data = json.loads(table.read_text())
    assert data["env"]["gpu"] and data["env"]["driver"] and data["env"]["torch"] and data["env"]["date"]
    assert table.with_suffix(".md").read_text() == module.render(data["env"], data["rows"], data["label"], data["left_out"])


@pytest.mark.parametrize("table", sorted((ROOT / "docs" / "results").glob("grading-two-gpus-*.json")), ids=lambda p: p.stem)
def test_two_gpu_tables_are_rendered_from_their_calls(table):
    """docs/results/grading-two-gpus-*.md is what scripts/two_gpu_table.py renders from the recorded calls."""
    module = load_script("scripts/two_gpu_table.py")
    data = json.loads(table.read_text())
    merged = module.merge([ROOT / "evidence" / "history" / name for name in data["sources"]])
    assert merged == data
    for stage in merged["stages"].values():
        assert stage["machine"]["gpus"] and stage["machine"]["driver"] and stage["machine"]["torch"]
        assert all(row["failed_checks"] is not None for row in stage["students"].values()), "a ledger is missing"
    assert table.with_suffix(".md").read_text() == module.render(merged)


def test_the_class_cost_table_is_copied_from_its_runs():
    """docs/results/class-cost-h100.md: every table row and the machine line come from the recorded runs."""
    text = (ROOT / "docs" / "results" / "class-cost-h100.md").read_text()
    recorded = "\n".join(path.read_text() for path in
                         sorted((ROOT / "evidence" / "history").glob("*-session33-call1-class-cost-*.md")))
    rows = [line for line in text.splitlines() if line.startswith("| 0")]
    assert len(rows) == 6 and all(row in recorded.splitlines() for row in rows)
    machine = next(line for line in text.splitlines() if line.startswith("> "))[2:]
    assert machine in recorded.splitlines()


def test_gpu_lanes_runs_plans_side_by_side_and_packs_what_they_wrote(tmp_path):
    """scripts/gpu_lanes.sh on the CPU, with an nvidia-smi that lists two GPUs: one lane runs a plan, the other is
    left idle ("-"); what comes back is one archive (a device call brings back 8 files at most) holding the lane's
    log and checks.jsonl, and the lane's traces beside it. A GPU call must not be where its mistakes are found."""
    import tarfile

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text('#!/bin/sh\n[ "$1" = -L ] && printf "GPU 0: fake\\nGPU 1: fake\\n"\n')
    (fake / "nvidia-smi").chmod(0o755)
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "tiny.env").write_text('STAGES="checks"\nPLAN="check:01:solution:torch:host_syncs"\nHARD_STOP=300\n')
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PLANS=str(plans), LANE_TMP=str(scratch), OUT=str(out),
               LANES="tiny -", SKIP_SETUP="1")
    done = subprocess.run(["bash", "scripts/gpu_lanes.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lane 0: tiny on GPU 0" in done.stdout and "lane 1" not in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["lane0-traces.tar.gz.part-aa", "lanes.tar.gz"]
    with tarfile.open(out / "lanes.tar.gz") as packed:
        names = {name.lstrip("./") for name in packed.getnames()}
        assert {"setup.log", "lane0-tiny.log", "lane0-tiny/checks.jsonl"} <= names
        row = json.loads(packed.extractfile("./lane0-tiny/checks.jsonl").read())
    assert row["chapter"] == "01_item_syncs" and row["exit_code"] == 0
    assert [c["status"] for c in row["checks"] if c["name"] == "host_syncs"] == ["passed"]
    with pytest.raises(subprocess.CalledProcessError):  # more lanes than GPUs: refused in one line
        subprocess.run(["bash", "scripts/gpu_lanes.sh"], cwd=ROOT, env=dict(env, LANES="tiny tiny tiny"),
                       capture_output=True, text=True, timeout=60, check=True)


@pytest.mark.slow
def test_the_two_gpu_script_grades_a_mixed_class_on_the_cpu(tmp_path):
    """scripts/grade_two_gpus.sh's class, its stages' records and scripts/two_gpu_table.py, run on the CPU (DEVICE=cpu),
    so that a GPU call does not find their mistakes: the solution and its restyling pass, the lab and a cheat fail,
    grading and `workbook check` agree."""
    env = dict(os.environ, OUT=str(tmp_path / "out"), CHAPTER="01", CLASS_SIZE="5", CHEATS="half_batch", DEVICE="cpu")
    for stage in ("one", "check"):
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "grade_two_gpus.sh"), stage], env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    refused = subprocess.run(["bash", str(ROOT / "scripts" / "grade_two_gpus.sh"), "two"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "needs CUDA" in refused.stderr
    record = tmp_path / "call-grade_two_gpus.json"
    shutil.copy(tmp_path / "out" / "grade_two_gpus.json", record)
    shutil.copy(tmp_path / "out" / "one_gpu-ledger.jsonl", tmp_path / "call-one_gpu-ledger.jsonl")
    merged = load_script("scripts/two_gpu_table.py").merge([record])
    assert merged["expected"] == {"student00-solution": "passed", "student01-lab": "not passed",
                                  "student02-slow": "not passed", "student03-restyled": "passed",
                                  "student04-cheat-half_batch": "not passed"}
    graded = {name: row["verdict"] for name, row in merged["stages"]["one_gpu"]["students"].items()}
    assert graded == {name: "passed" if want == "passed" else "failed" for name, want in merged["expected"].items()}
    assert {name: row["verdict"] for name, row in merged["checks"].items()} == graded
    assert "same_work" in merged["stages"]["one_gpu"]["students"]["student04-cheat-half_batch"]["failed_checks"]
    text = load_script("scripts/two_gpu_table.py").render(merged)
    assert "no GPU (the CPU)" in text and "every pass or fail the same as grading's" in text


def test_a_check_started_without_a_compile_cache_counts_as_cold():
    """check_wall_s is a check after another on the machine; check_wall_s_cold the first of a call, or one that
    gpu_verify.sh started with no compile cache (a plan item's @COLD=1, recorded as the row's "cold")."""
    from checker.pages.results import build_results

    env = {"gpu": "G", "driver": "D", "torch": "T", "cuda": "C", "cpu_count": 1, "date": "2026-01-01"}
    fast = _check("throughput", "passed", 1.7, speedup=3.0, speedup_min=2.9, speedup_max=3.1,
                  baseline_samples_per_s=1.0, candidate_samples_per_s=3.0)
    rows = [_row("solution", "torch", [fast], True, wall_s_outer=50.0, first_of_call=True),
            _row("solution", "torch", [fast], True, wall_s_outer=30.0),
            _row("solution", "torch", [fast], True, wall_s_outer=70.0, cold=True),
            _row("solution", "torch", [fast], True, wall_s_outer=32.0, cold=False)]
    head = build_results(env, rows, "05_pointwise_chains", {"throughput": 1.7})["headline"]
    assert (head["check_wall_s"], head["check_wall_s_cold"]) == (31.0, 60.0)
    markdown = render_markdown(build_results(env, rows, "05_pointwise_chains", {"throughput": 1.7}))
    assert "31 s after another check on the machine and 60 s as the first check of a call or with no compile" \
        in markdown


def _page_text(path) -> str:
    """A built page's text as a reader sees it: tags (the highlighter's spans) removed, entities decoded."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_pages_show_the_labs_as_shipped_whatever_the_learner_did(tmp_path):
    """A learner who rewrote every lab (here: the solution, without its snippet markers) and filled in chapter 08's
    answer still builds the site, and its pages show the labs and the answer form as shipped (from git's history);
    in a download without .git the slow script, the same code, stands in for an edited lab and the site still builds."""
    import re

    from checker.grader.pristine import side_files, write_pristine_lab

    scratch = tmp_path / "checkout"
    for folder in ("docs", "overrides", "checker", "chapters", "solutions"):
        shutil.copytree(ROOT / folder, scratch / folder, ignore=shutil.ignore_patterns("__pycache__", "site"))
    shutil.copy(ROOT / "mkdocs.yml", scratch / "mkdocs.yml")
    for chapter in all_chapters():  # this checkout's labs as shipped, whatever the learner did to them
        if write_pristine_lab(chapter, scratch / "labs" / chapter.id)[1] == f"chapters/{chapter.id}/slow.py" or \
                len(list((scratch / "labs" / chapter.id).iterdir())) != 1 + len(side_files(chapter)):
            pytest.skip(f"labs/{chapter.id} holds the learner's work and this checkout has no git history holding "
                        "the shipped one")
    git = lambda *args: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=scratch,
                                       check=True, capture_output=True)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "as shipped")
    shipped_07 = (scratch / "labs" / "07_capstone_ladder" / "train.py").read_text()
    for chapter in all_chapters():
        lab = scratch / "labs" / chapter.id / chapter.lab_file
        lab.write_text(re.sub(r"^# --8<-- .*\n", "", chapter.solution_script.read_text(), flags=re.M))
    (scratch / "labs" / "08_triage" / "answer.toml").write_text((ROOT / "solutions" / "08_triage" / "answer.toml").read_text())
    env = dict(os.environ, WORKBOOK_ROOT=str(scratch), PYTHONPATH=str(scratch))

    def build(site):
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=scratch,
                              env=env, capture_output=True, text=True)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        return proc.stderr

    build(tmp_path / "site")
    page_07 = _page_text(tmp_path / "site" / "chapters" / "07_capstone_ladder" / "index.html")
    assert "running_loss += loss.item()" in shipped_07 and "running_loss += loss.item()" in page_07
    page_08 = _page_text(tmp_path / "site" / "chapters" / "08_triage" / "index.html")
    assert 'job = ""' in page_08 and 'wall = ""' in page_08  # the blank form, not the learner's answer

    shutil.rmtree(scratch / ".git")
    log = build(tmp_path / "no-git")
    assert "chapters/07_capstone_ladder/slow.py" in log  # said, at INFO: the slow script stands in
    assert "running_loss += loss.item()" in _page_text(tmp_path / "no-git" / "chapters" / "07_capstone_ladder" / "index.html")


def test_the_doctor_table_is_rendered_from_the_runs_it_names():
    """docs/results/doctor-gpu.md is what scripts/doctor_table.py renders from the doctor_verify runs it names, and
    every claim in them held."""
    module = load_script("scripts/doctor_table.py")
    text = (ROOT / "docs" / "results" / "doctor-gpu.md").read_text()
    names = re.findall(r"`evidence/history/([^`]+-doctor-verify\.json)`", text)
    sources = [(name, json.loads((ROOT / "evidence" / "history" / name).read_text())) for name in names]
    assert {data["gpu"] for _, data in sources} >= {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    assert text == module.render(sources)
    assert all(row["ok"] for _, data in sources for row in data["rows"]), "a claim the page shows missed"
