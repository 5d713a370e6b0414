"""The training process's CPU time per traced step in chapter 03 on a CPU (samples_in_workers' training_cpu_share):
the slow script, the reference solution and the red team's hidden_prims_03 (samples decoded in the training process
by calls its trace does not show), each traced twice as the grader traces it.

    python evidence/made-by/training_cpu_03.py > evidence/history/2026-11-27-cpu-session43-training-cpu-03.md
"""

import datetime
import os
import platform
from pathlib import Path

import torch

from checker.base.chapters import get_chapter
from checker.grader.pairs import traced_steps
from checker.grader.runs import run_script

ROOT = Path(__file__).resolve().parents[2]
chapter = get_chapter("03")
steps = traced_steps(chapter.config("cpu"))
print(f"# Chapter 03: the training process's CPU time per traced step ({platform.machine()}, {os.cpu_count()} "
      f"cores, torch {torch.__version__}, {datetime.date.today()})\n")
print("| script | run | training process CPU ms per step | other processes' CPU ms per step | share of the slow script's |")
print("|---|---|---|---|---|")
slow = None
for name, script in (("slow script", chapter.slow_script),
                     ("solution", ROOT / "solutions" / "03_dataloader_workers" / "train.py"),
                     ("hidden_prims_03", ROOT / "tests" / "redteam" / "cheats" / "hidden_prims_03" / "train.py")):
    for run in (1, 2):
        result = run_script(chapter, script, "cpu", steps=steps, trace="torch", seed=3, window_key=5)
        own, other = (ns / 1e6 / len(result.step_ms) for ns in result.window_cpu_ns)
        slow = own if slow is None else slow
        print(f"| {name} | {run} | {own:.1f} | {other:.1f} | {own / slow:.2f} |")
