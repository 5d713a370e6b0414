"""How far apart two runs of the same code land on this machine's CPU: can it grade a speedup?

Runs the slow script, the unmodified lab (the slow script's code) and the reference solution of a chapter
alternately in separate processes, as `workbook check` does, and records every run's samples/s. The lab
against the slow script is a pair whose true speedup is 1.00x: the spread of its ratios is the noise a
CPU speed verdict would have to clear, and the solution's ratios are the signal.

    python scripts/cpu_noise.py 04 --trials 8 --out docs/results/04_eager_microops-cpu-noise
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import secrets
import statistics
import sys
from pathlib import Path

import torch

from checker.base.chapters import get_chapter
from checker.grader.runs import run_script
from checker.grader.sandbox import check_folder

VARIANTS = ("slow", "lab", "solution")


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else ""
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_average": os.getloadavg()[0]}


def render(chapter_id: str, env: dict, runs: list[dict]) -> str:
    def ratios(variant: str) -> list[float]:
        slow = {r["trial"]: r["samples_per_s"] for r in runs if r["variant"] == "slow"}
        return [r["samples_per_s"] / slow[r["trial"]] for r in runs if r["variant"] == variant and r["trial"] in slow]

    lines = [f"Measured on a CPU: **{env['cpu']}**, {env['cores']} cores, torch {env['torch']}, Python {env['python']}, "
             f"on {env['date'][:10]} (load average {env['load_average']:.1f} at the start), by `scripts/cpu_noise.py "
             f"{chapter_id[:2]}`. Each trial runs the three scripts one after another in separate processes, in "
             "alternating order; a ratio is a run's samples/s over the slow script's in the same trial.", "",
             "| script | samples/s, median | min | max | ratio to the slow script: median | min | max |",
             "|---|---|---|---|---|---|---|"]
    for variant in VARIANTS:
        speeds = [r["samples_per_s"] for r in runs if r["variant"] == variant]
        if not speeds:
            continue
        row = f"| {variant} | {statistics.median(speeds):,.0f} | {min(speeds):,.0f} | {max(speeds):,.0f} |"
        xs = ratios(variant) if variant != "slow" else []
        row += (f" {statistics.median(xs):.2f}x | {min(xs):.2f}x | {max(xs):.2f}x |" if xs else " | | |")
        lines.append(row)
    slow = [r["samples_per_s"] for r in runs if r["variant"] == "slow"]
    lab, solution = ratios("lab"), ratios("solution")
    if lab:
        lines += ["", f"The lab runs the slow script's code, so its true ratio is 1.00x: its trials ranged "
                      f"{min(lab):.2f}x to {max(lab):.2f}x. The slow script itself ran between {min(slow):,.0f} and "
                      f"{max(slow):,.0f} samples/s, {max(slow) / min(slow):.2f}x apart, with nothing changed but the "
                      "moment it ran."]
    if solution:
        lines[-1] += (f" The reference solution's trials ranged {min(solution):.2f}x to {max(solution):.2f}x.")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapter")
    parser.add_argument("--trials", type=int, default=8, help="rounds of slow, lab, solution (default 8)")
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json (every run) and OUT.md (the table)")
    parser.add_argument("--render", action="store_true", help="only rewrite OUT.md from OUT.json")
    args = parser.parse_args()
    chapter = get_chapter(args.chapter)
    if args.render:
        saved = json.loads(args.out.with_suffix(".json").read_text())
        args.out.with_suffix(".md").write_text(render(saved["chapter"], saved["env"], saved["runs"]))
        print(args.out.with_suffix(".md").read_text())
        return 0
    env = machine()
    runs = []
    folder = check_folder()
    for trial in range(args.trials):
        seed, key = secrets.randbelow(2**31 - 1) + 1, secrets.randbelow(2**31 - 1) + 1  # one secret a trial
        for variant in VARIANTS if trial % 2 == 0 else VARIANTS[::-1]:
            run = run_script(chapter, chapter.script_for(variant), "cpu", workdir=folder, seed=seed, window_key=key)
            runs.append({"trial": trial, "variant": variant, "samples_per_s": round(run.samples_per_s, 1),
                         "window_s": round(run.window_s, 4)})
            print(json.dumps(runs[-1]), flush=True)
    args.out.with_suffix(".json").write_text(json.dumps({"chapter": chapter.id, "env": env, "runs": runs}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(chapter.id, env, runs))
    print(args.out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
