"""Turn a gpu_verify.sh output folder into results files: <OUT>/results/<chapter>.json and .md, plus a summary.

    python scripts/summarize_gpu_run.py $OUT          # prints a summary table (Markdown)
    python scripts/summarize_gpu_run.py $OUT run1/checks.jsonl run2/checks.jsonl    # several runs' checks together

The environment (GPU, driver, torch, date) is $OUT/env.json: give the folder of the latest run.
Copy <OUT>/results/* into docs/results/ to publish them; the chapter pages include the .md files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from checker.chapters import all_chapters, get_chapter
from checker.results import build_results, render_markdown


def main() -> int:
    out = Path(sys.argv[1])
    env = json.loads((out / "env.json").read_text())
    files = [Path(p) for p in sys.argv[2:]] or [out / "checks.jsonl"]
    rows = [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines() if line.strip()]
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
