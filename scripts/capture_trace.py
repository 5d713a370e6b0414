"""Capture one steady-state trace of a chapter script with torch.profiler or nsys (for the docs' pictures).

    python scripts/capture_trace.py 01 --variant slow --tool torch --out /tmp/t/01-slow-torch

Writes <out>.json.gz (torch) or <out>.sqlite (nsys), plus <out>.result.json with what the run measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from checker.chapters import get_chapter
from checker.runs import run_script


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("chapter")
    parser.add_argument("--variant", default="slow")
    parser.add_argument("--tool", choices=("torch", "nsys"), default="torch")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    chapter = get_chapter(args.chapter)
    cfg = chapter.config(args.device)
    steps = int(cfg["warmup"]) + int(cfg.get("trace_steps", 10))
    work = args.out.parent / (args.out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    run = run_script(chapter, chapter.script_for(args.variant), args.device, steps=steps, trace=args.tool, workdir=work)
    suffix = ".json.gz" if args.tool == "torch" else ".sqlite"
    target = args.out.with_name(args.out.name + suffix)
    shutil.move(str(run.trace_file), target)
    args.out.with_name(args.out.name + ".result.json").write_text(json.dumps(run.raw, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
