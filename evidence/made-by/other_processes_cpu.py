"""What the grader reads of a traced run's other processes, and of the gradients its steps store, on this CPU.

    python evidence/made-by/other_processes_cpu.py > evidence/history/<date>-cpu-other-processes.md

For each script: the traced pair's CPU time in the timed window (the training process's, and every other process's
under the run: checker.grader.sandbox.cpu_of_run), and same_work's count of gradients stored per window step against
the model's trainable tensors (checker.checks.same_work.steps_trained). These set collect.OTHER_PROCESS_SHARE and
back the rule that every window step stores a gradient into every trainable tensor.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from checker.base.chapters import all_chapters, get_chapter  # noqa: E402
from checker.grader.evaluate import Evaluation  # noqa: E402

CHEATS = ROOT / "tests" / "redteam" / "cheats"
WINDOW_CPU = [("06", "solution"), ("06", CHEATS / "helper_reads_06"), ("04", "solution"), ("04", CHEATS / "helper_step_04"),
              ("03", "solution"), ("07", CHEATS / "helper_step_07")]


def window_cpu(chapter_id: str, which) -> tuple[str, float, float]:
    chapter = get_chapter(chapter_id)
    script = chapter.script_for(which) if isinstance(which, str) else which / chapter.lab_file
    ev = Evaluation(chapter, script, "cpu")
    try:
        made = ev.make_runs()
        _, candidate = made.traced or made.timed[0]
        own, others = candidate.window_cpu_ns or (0, 0)
    finally:
        ev.cleanup()
    shown = which if isinstance(which, str) else which.name
    return shown, own / 1e6, others / 1e6


def gradients_stored(chapter_id: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "checker", "check", chapter_id, "--variant", "solution",
                           "--device", "cpu", "--only", "same_work", "--json"], capture_output=True, text=True, cwd=ROOT)
    report = json.loads(proc.stdout)
    same = next(c for c in report["checks"] if c["name"] == "same_work")
    return same["measured"].get("steps_trained", {})


def main() -> None:
    print(f"# Other processes and stored gradients on a CPU ({dt.date.today()})\n")
    print(f"Machine: {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"Python {platform.python_version()}; written by `evidence/made-by/other_processes_cpu.py`.\n")
    print("| chapter | script | training process, ms of CPU in the window | other processes, ms | share |")
    print("|---|---|---|---|---|")
    for chapter_id, which in WINDOW_CPU:
        shown, own, others = window_cpu(chapter_id, which)
        print(f"| {chapter_id} | {shown} | {own:.0f} | {others:.1f} | {others / max(own, 1e-9):.1%} |")
    print("\n| chapter | solution: window steps | trainable tensors | fewest gradients stored in a step |")
    print("|---|---|---|---|")
    for chapter in all_chapters():
        counted = gradients_stored(chapter.id)
        print(f"| {chapter.id} | {counted.get('steps')} | {counted.get('parameters')} | "
              f"{counted.get('least_gradients_stored')} |")


if __name__ == "__main__":
    main()
