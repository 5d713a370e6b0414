"""What moves chapter 03's CPU times on a shared machine: the slow script's CPU per window step (it decodes every
JPEG in its training process), each run between two timings of a fixed single-threaded sha256 loop in this process.
If the loop's time stays put while the script's moves, the machine's drift is in memory-heavy work like decoding,
not in the core's clock.

    python evidence/made-by/cpu_drift_03.py 8 > evidence/history/2026-12-02-cpu-session51-cpu-drift-03.md
"""

import datetime
import hashlib
import os
import platform
import sys
import time

import torch

from checker.base.chapters import get_chapter
from checker.grader.runs import run_script

chapter = get_chapter("03")
BLOB = bytes(range(256)) * 4096  # 1 MiB


def loop_ms() -> float:
    start = time.thread_time_ns()
    for _ in range(40):
        hashlib.sha256(BLOB).digest()
    return (time.thread_time_ns() - start) / 1e6


print(f"# Chapter 03: the slow script's CPU per window step beside a fixed sha256 loop ({platform.machine()}, "
      f"{os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()})\n")
print("| run | sha256 loop before, ms | slow script CPU ms per step | sha256 loop after, ms |")
print("|---|---|---|---|")
for number in range(int(sys.argv[1]) if len(sys.argv) > 1 else 8):
    before = loop_ms()
    run = run_script(chapter, chapter.slow_script, "cpu", seed=3 + number, window_key=5 + number)
    after = loop_ms()
    print(f"| {number + 1} | {before:.1f} | {run.window_cpu_ns[0] / 1e6 / len(run.step_ms):.1f} | {after:.1f} |",
          flush=True)
