"""Chapter 03 on a CPU: the training process's CPU time per window step against the slow script's, pair by pair and
pooled as samples_in_workers pools it (training_cpu_share), for the reference solution and the red team's
hidden_prims_03 (samples decoded in the training process by calls its trace does not show). Each pair is the slow
script's timed run and the candidate's, under one seed, as the grader makes a timed pair.

    python evidence/made-by/training_cpu_pairs_03.py 12 > evidence/history/2026-12-02-cpu-session51-training-cpu-pairs-03.md
"""

import datetime
import os
import platform
import statistics
import sys
from pathlib import Path

import torch

from checker.base.chapters import get_chapter
from checker.grader.runs import run_script

ROOT = Path(__file__).resolve().parents[2]
chapter = get_chapter("03")
pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 12
pooled_over = int(chapter.config("cpu")["min_trials"]) + 1  # the timed pairs and the traced pair
print(f"# Chapter 03: the training process's CPU time per window step, pair by pair ({platform.machine()}, "
      f"{os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()})\n")
print(f"Untraced timed pairs of {chapter.config('cpu')['steps']} steps. 'pooled' sums {pooled_over} consecutive pairs "
      "as the check pools the pairs of one grading.\n")
print("| candidate | pair | slow script CPU ms/step | candidate CPU ms/step | its workers' CPU ms/step | share |")
print("|---|---|---|---|---|---|")
summary = []
for name, script in (("solution", ROOT / "solutions" / "03_dataloader_workers" / "train.py"),
                     ("hidden_prims_03", ROOT / "tests" / "redteam" / "cheats" / "hidden_prims_03" / "train.py")):
    rows = []
    for number in range(pairs):
        made = [run_script(chapter, path, "cpu", seed=3 + number, window_key=5 + number)
                for path in (chapter.slow_script, script)]
        (slow_ns, _), (own_ns, other_ns) = (run.window_cpu_ns for run in made)
        slow_steps, own_steps = (len(run.step_ms) for run in made)
        rows.append((slow_ns, slow_steps, own_ns, own_steps))
        share = (own_ns / own_steps) / (slow_ns / slow_steps)
        print(f"| {name} | {number + 1} | {slow_ns / 1e6 / slow_steps:.1f} | {own_ns / 1e6 / own_steps:.1f} | "
              f"{other_ns / 1e6 / own_steps:.1f} | {share:.3f} |", flush=True)
    single = [(c / cs) / (s / ss) for s, ss, c, cs in rows]
    pooled = []
    for at in range(0, len(rows) - pooled_over + 1, pooled_over):
        group = rows[at:at + pooled_over]
        pooled.append((sum(r[2] for r in group) / sum(r[3] for r in group))
                      / (sum(r[0] for r in group) / sum(r[1] for r in group)))
    summary.append(f"| {name} | {min(single):.3f} to {max(single):.3f} (median {statistics.median(single):.3f}) | "
                   + ", ".join(f"{p:.3f}" for p in pooled) + " |")
print("\n| candidate | one pair's share | pooled shares |")
print("|---|---|---|")
print("\n".join(summary))
