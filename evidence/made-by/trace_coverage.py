"""How much of each traced step recorded PyTorch ops cover: the numbers behind checker.grader.collect.OP_COVERAGE_FLOOR.

Reads traces kept by `workbook check NN ... --device cpu --keep-traces DIR` (one folder per run, named for what
ran) and writes a table: per trace, the lowest and the median share of a step's time that recorded ops
cover, and what checker.grader.collect.hidden_work says of it.

    python evidence/made-by/trace_coverage.py /tmp/traces/* --out docs/results/cpu-trace-coverage.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import statistics
import sys
from pathlib import Path

import torch

from checker.base.errors import WorkbookError
from checker.base.chapters import get_chapter
from checker.grader.collect import OP_COVERAGE_FLOOR, hidden_work, op_coverage
from checker.trace import load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders of traces kept by workbook check")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lines = [f"Made by `evidence/made-by/trace_coverage.py` on {datetime.date.today().isoformat()}: CPU traces kept by "
             f"`workbook check NN --device cpu --keep-traces`, torch {torch.__version__}, {platform.machine()}, "
             f"{os.cpu_count()} cores. The floor is {OP_COVERAGE_FLOOR:.0%} of a step's time (median over the "
             "traced steps; in chapters about loading data, of the step's time not spent waiting for its batch).", "",
             "| run | trace | steps | covered: lowest step | median | what the grader says |", "|---|---|---|---|---|---|"]
    for folder in args.folders:
        for path in sorted(folder.glob("*-torch.json*")):
            try:
                trace = load(path)
            except WorkbookError as err:
                print(f"{path}: {err}", file=sys.stderr)
                continue
            chapter = get_chapter(path.name.split("_", 1)[0])
            excuse = any(c.name in ("data_wait", "loader_settings") for c in chapter.checks)  # as the grader does
            found = op_coverage(trace.events, trace.get_steps(), excuse)
            verdict = hidden_work(trace.events, trace.get_steps(), excuse) or "believed"
            role = "slow script" if "-baseline" in path.name else "candidate"
            rank = re.search(r"\.rank(\d+)-", path.name)  # a data-parallel job's trace of one rank (rank 0: none)
            role += f", rank {rank.group(1)}" if rank else (", rank 0" if get_chapter(path.name[:2]).number == 9 else "")
            lines.append(f"| {folder.name} | {role} | {len(found)} | {min(found):.1%} | {statistics.median(found):.1%} "
                         f"| {verdict.split(': ', 1)[0]} |")
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
