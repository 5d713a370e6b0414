"""Turn a gpu_verify.sh output folder into results files: <OUT>/results/<chapter>.json and .md, plus a summary.

    python scripts/summarize_gpu_run.py $OUT          # prints a summary table (Markdown)
    python scripts/summarize_gpu_run.py $OUT run1/checks.jsonl run2/checks.jsonl    # several runs' checks together
    python scripts/summarize_gpu_run.py $OUT a.jsonl b.jsonl --drop b.jsonl#4     # without b's 4th row

--drop FILE#N (repeatable) leaves out the Nth row (from 1) of FILE: a row measured by code that has changed since.
--manifest evidence/history/assembly.json builds what that file names: how the committed results were made
(tests/test_docs.py checks that it still gives the committed files).

The environment (GPU, driver, torch, date) is $OUT/env.json: give the folder of the latest run.
Copy <OUT>/results/* into docs/results/ to publish them; the chapter pages include the .md files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from checker.base.errors import WorkbookError
from checker.pages.results import assemble, assemble_manifest, chapter_results, read_rows, render_markdown


def main() -> int:
    parser = argparse.ArgumentParser(prog="summarize_gpu_run.py")
    parser.add_argument("out", type=Path, help="a gpu_verify.sh output folder (its env.json); results go to OUT/results")
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--drop", action="append", default=[], metavar="FILE#N")
    parser.add_argument("--manifest", type=Path, help="build what this assembly.json names instead (env, rows, drop)")
    args = parser.parse_args()
    if args.manifest:
        chapters = assemble_manifest(args.manifest)
    else:
        env = json.loads((args.out / "env.json").read_text())
        built = assemble(env, read_rows(args.files or [args.out / "checks.jsonl"], args.drop))
        chapters = {chapter_id: chapter_results(chapter_id, [results]) for chapter_id, results in built.items()}
    results_dir = args.out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    for chapter_id, results in chapters.items():
        (results_dir / f"{chapter_id}.json").write_text(json.dumps(results, indent=1) + "\n")
        markdown = render_markdown(results)
        (results_dir / f"{chapter_id}.md").write_text(markdown)
        print(f"## {chapter_id}\n\n{markdown}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError, WorkbookError) as err:  # a missing file, a bad row, a --drop naming no row
        sys.exit(f"summarize_gpu_run.py: {err}")
