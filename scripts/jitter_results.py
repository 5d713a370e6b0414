"""Measure the slow script and the solution with several worker counts: mean throughput against p50/p90/max.

The table on the chapter's page ("the median alone can lie") comes from this script, run on the GPU machine:

    python scripts/jitter_results.py --device cuda --workers 2,4,8,12 --trials 2 \\
        --out docs/results/03_dataloader_workers-jitter
    python scripts/jitter_results.py --device cpu --workers 1,2 --trials 2 \\
        --out docs/results/03_dataloader_workers-jitter-cpu

It writes <out>.json (every run) and <out>.md (the table the page includes), with GPU, driver, torch and date.
Runs alternate between the settings within each trial, as `workbook check` alternates baseline and candidate.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
from pathlib import Path

import torch

from checker.base.chapters import get_chapter
from checker.base.stats import step_time_stats
from checker.grader.runs import run_script


def environment(device: str) -> dict:
    """What the numbers were measured on."""
    env = {"torch": torch.__version__, "cpu_count": os.cpu_count(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        env["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
    else:
        env["gpu"], env["driver"] = "none (CPU)", None
    return env


def measure(chapter, settings: list[tuple[str, str, list[str]]], device: str, trials: int) -> list[dict]:
    """settings: (label, variant, --set overrides); returns one row per setting with every trial's numbers."""
    rows = [{"label": label, "variant": variant, "overrides": overrides, "samples_per_s": [], "step_ms": []}
            for label, variant, overrides in settings]
    for trial in range(trials):
        for row in rows if trial % 2 == 0 else rows[::-1]:
            extra = [a for o in row["overrides"] for a in ("--set", o)]
            run = run_script(chapter, chapter.script_for(row["variant"]), device, extra_args=extra)
            row["samples_per_s"].append(run.samples_per_s)
            row["step_ms"].append(run.step_ms)
            print(f"{row['label']}: {run.samples_per_s:,.0f} samples/s", flush=True)
    return rows


def render(env: dict, rows: list[dict]) -> str:
    baseline = statistics.median(rows[0]["samples_per_s"])
    lines = [
        (f"Measured on **{env['gpu']}** (driver {env['driver']}, torch {env['torch']}, {env['cpu_count']} CPU cores) "
         if env.get("driver") else f"Measured on **a CPU with {env['cpu_count']} cores, no GPU** (torch {env['torch']}) ") +
        f"on {env['date'][:10]}, by `scripts/jitter_results.py`; medians over "
        f"{len(rows[0]['samples_per_s'])} runs, step times pooled over them.",
        "",
        "| loader | samples/s (mean over the window) | vs slow | step p50 | step p90 | step max |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        sps = statistics.median(row["samples_per_s"])
        stats = step_time_stats([ms for run in row["step_ms"] for ms in run])
        lines.append(f"| {row['label']} | {sps:,.0f} | {sps / baseline:.2f}x | {stats['p50']:.1f} ms | "
                     f"{stats['p90']:.1f} ms | {stats['max']:.1f} ms |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", default="2,4,8,12", help="worker counts to run the solution with")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True, help="path without suffix; .json and .md are written")
    args = parser.parse_args()
    chapter = get_chapter("03_dataloader_workers")
    settings = [("slow script: num_workers=0", "slow", [])]
    settings += [(f"solution, num_workers={n}", "solution", [f"num_workers={n}"]) for n in args.workers.split(",")]
    rows = measure(chapter, settings, args.device, args.trials)
    env = environment(args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({**env, "rows": rows}, indent=1) + "\n")
    markdown = render(env, rows)
    args.out.with_suffix(".md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
