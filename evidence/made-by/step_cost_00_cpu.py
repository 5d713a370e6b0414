"""Chapter 00's step_cost on this CPU: the solution's and the lab's mean step against the slow script's beside it
(both traced, same secret), from `workbook check 00 --json`, N checks each. Writes
docs/results/00_measuring_right-step-cost-cpu.md, which chapter.toml's threshold.cpu cites.

    python evidence/made-by/step_cost_00_cpu.py 3
"""

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "results" / "00_measuring_right-step-cost-cpu.md"


def ratio(variant: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "checker", "check", "00", "--variant", variant, "--device", "cpu",
                           "--only", "step_cost", "--json"], cwd=ROOT, capture_output=True, text=True)
    report = json.loads(proc.stdout)
    return next(c for c in report["checks"] if c["name"] == "step_cost")["measured"]


def main(count: int) -> None:
    rows = [(variant, ratio(variant)) for _ in range(count) for variant in ("solution", "lab")]
    lines = [f"# Chapter 00 step_cost on a CPU ({platform.node() and 'the development machine'}, "
             f"{os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()})", "",
             "Each row is one `workbook check 00 --only step_cost`: the candidate's mean step over its timed window and the "
             "slow script's beside it, under the same secret, both traced. Written by "
             "`evidence/made-by/step_cost_00_cpu.py`.", "",
             "| variant | candidate ms/step | slow script ms/step | ratio |", "|---|---|---|---|"]
    lines += [f"| {v} | {m['candidate_step_ms']:.1f} | {m['baseline_step_ms']:.1f} | {m['ratio']:.3f} |" for v, m in rows]
    worst = max(m["ratio"] for _, m in rows)
    lines += ["", f"Largest honest ratio: {worst:.3f}."]
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
