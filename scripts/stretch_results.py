"""Measure the slow script, the solution and the stretch solution (a CUDA-stream prefetcher) side by side.

The stretch numbers on the chapter's page come from this script, run on the GPU machine:

    python scripts/stretch_results.py --device cuda --trials 3 \\
        --out docs/results/02_pageable_copies-prefetch

It writes <out>.json (every run) and <out>.md (the table the page includes), with GPU, driver, torch and date.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from pathlib import Path

from checker.base.chapters import get_chapter
from checker.base.stats import step_time_stats
from checker.base.paths import repo_root
from checker.grader.runs import run_script


def _jitter_module():
    """The table helpers of chapter 03's results script (one implementation for both chapters)."""
    path = repo_root() / "scripts" / "jitter_results.py"
    spec = importlib.util.spec_from_file_location("jitter_results", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render(env: dict, rows: list[dict]) -> str:
    """The table the page includes, from the runs in <out>.json (a test renders it again and compares)."""
    baseline = statistics.median(rows[0]["samples_per_s"])
    lines = [
        f"Measured on **{env['gpu']}** (driver {env['driver']}, torch {env['torch']}) on {env['date'][:10]}, by "
        f"`scripts/stretch_results.py`; medians over {len(rows[0]['samples_per_s'])} runs each, "
        "alternating.",
        "",
        "| script | samples/s | vs slow | step p50 |",
        "|---|---|---|---|",
    ]
    for row in rows:
        sps = statistics.median(row["samples_per_s"])
        p50 = step_time_stats([ms for run in row["step_ms"] for ms in run])["p50"]
        lines.append(f"| {row['label']} | {sps:,.0f} | {sps / baseline:.2f}x | {p50:.1f} ms |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="path without suffix; .json and .md are written")
    args = parser.parse_args()
    chapter = get_chapter("02_pageable_copies")
    scripts = [
        ("slow script: pageable, blocking", chapter.slow_script),
        ("solution: pin_memory + non_blocking", chapter.solution_script),
        ("stretch: + copy on a side stream, one batch ahead", chapter.solution_script.parent / "prefetch" / "train.py"),
    ]
    rows = [{"label": label, "script": str(path.relative_to(repo_root())), "samples_per_s": [], "step_ms": []}
            for label, path in scripts]
    for trial in range(args.trials):
        order = list(zip(rows, scripts)) if trial % 2 == 0 else list(zip(rows, scripts))[::-1]
        for row, (_, path) in order:
            run = run_script(chapter, path, args.device)
            row["samples_per_s"].append(run.samples_per_s)
            row["step_ms"].append(run.step_ms)
            print(f"{row['label']}: {run.samples_per_s:,.0f} samples/s", flush=True)
    env = _jitter_module().environment(args.device)
    markdown = render(env, rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({**env, "rows": rows}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
