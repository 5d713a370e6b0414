"""Turn a gpu_verify.sh output folder into results files: <OUT>/results/<chapter>.json and .md, plus a summary.

    python scripts/summarize_gpu_run.py $OUT          # prints a summary table (Markdown)
    python scripts/summarize_gpu_run.py $OUT run1/checks.jsonl run2/checks.jsonl    # several runs' checks together
    python scripts/summarize_gpu_run.py $OUT a.jsonl b.jsonl --drop b.jsonl#4     # without b's 4th row

--drop FILE#N (repeatable) leaves out the Nth row (from 1) of FILE: a row measured by code that has changed since.

The environment (GPU, driver, torch, date) is $OUT/env.json: give the folder of the latest run.
Copy <OUT>/results/* into docs/results/ to publish them; the chapter pages include the .md files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from checker.chapters import all_chapters, get_chapter
from checker.results import build_results, render_markdown


def main() -> int:
    parser = argparse.ArgumentParser(prog="summarize_gpu_run.py")
    parser.add_argument("out", type=Path)
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--drop", action="append", default=[], metavar="FILE#N")
    args = parser.parse_args()
    out = args.out
    env = json.loads((out / "env.json").read_text())
    files = args.files or [out / "checks.jsonl"]
    dropped = {(Path(f).name, int(n)) for f, _, n in (d.rpartition("#") for d in args.drop)}
    rows = [json.loads(line) for f in files if f.exists()
            for number, line in enumerate((ln for ln in f.read_text().splitlines() if ln.strip()), start=1)
            if (f.name, number) not in dropped]
    for row in rows:  # older runs recorded the chapter as given on the command line ("01")
        row["chapter"] = get_chapter(str(row["chapter"])).id
    results_dir = out / "results"
    results_dir.mkdir(exist_ok=True)
    for chapter in all_chapters():
        mine = [r for r in rows if r.get("chapter") == chapter.id]
        if not mine:
            continue
        thresholds = {spec.name: spec.threshold_for("cuda") for spec in chapter.checks}
        results = build_results(env, mine, chapter.id, thresholds)
        (results_dir / f"{chapter.id}.json").write_text(json.dumps(results, indent=1) + "\n")
        markdown = render_markdown(results)
        (results_dir / f"{chapter.id}.md").write_text(markdown)
        print(f"## {chapter.id}\n\n{markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
