"""Seconds per student of `workbook grade`, with the slow script paired with every run (--baseline-every 0) and
with its speed shared by the worker (the default), on the same class, interleaved.

    python scripts/class_cost.py 01 03 --students 6 --device cpu --out docs/results/grading-baseline-cpu.md

The class is made of copies of the chapter's reference solution and of its unmodified lab (alternating), so
that both kinds of verdict are paid for. Each mode grades the class into a fresh output folder; the table
shows the wall time of the whole command, the median of the ledger's per-student wall time, and whether the
verdicts agree between the two modes. The results line records the machine, versions, date and load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checker.base.chapters import get_chapter  # noqa: E402
from checker.grader.pristine import write_pristine_lab  # noqa: E402

MODES = (("paired", ["--baseline-every", "0"]), ("shared", []))


def make_class(chapter, folder: Path, students: int) -> None:
    for number in range(students):
        student = folder / f"s{number:02d}"
        student.mkdir(parents=True)
        if number % 2 == 0:
            shutil.copy(chapter.solution_script, student / chapter.lab_file)
        else:
            write_pristine_lab(chapter, student)


def grade(chapter_id: str, subs: Path, out: Path, device: str, extra: list[str]) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "checker", "grade", chapter_id, str(subs), "--out", str(out),
                           "--device", device, *extra], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"workbook grade {chapter_id} ({' '.join(extra) or 'default'}) exited {proc.returncode}: "
                         + (proc.stdout + proc.stderr).strip().splitlines()[-1])
    records = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines() if line.strip()]
    return wall, records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="+")
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    machine = describe_machine(args.device)
    rows = []
    for chapter_id in args.chapters:
        chapter = get_chapter(chapter_id)
        with tempfile.TemporaryDirectory(prefix="class-cost-") as tmp:
            subs = Path(tmp) / "subs"
            make_class(chapter, subs, args.students)
            found = {}
            for name, extra in MODES:
                wall, records = grade(chapter.id, subs, Path(tmp) / f"grades-{name}", args.device, extra)
                found[name] = (wall, records)
                print(f"{chapter.id} {name}: {wall:.1f} s", flush=True)
            verdicts = {name: sorted((r["student"], r["verdict"]) for r in records)
                        for name, (_, records) in found.items()}
            for name, (wall, records) in found.items():
                rows.append((chapter.id, name, len(records), wall, statistics.median(r["wall_s"] for r in records),
                             verdicts[name] == verdicts["paired"]))
        write_table(args, machine, rows, load)  # after every chapter, so that a cut run keeps what it measured
    return 0 if all(row[-1] for row in rows) else 1


def describe_machine(device: str) -> str:
    """The GPU (with its driver and CUDA) or the CPU, and the Python and torch, as the results line names them."""
    import torch

    if device == "cuda":
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.split()
        name = f"{torch.cuda.get_device_name(0)} (driver {driver[0] if driver else 'unknown'}, CUDA {torch.version.cuda})"
    else:
        name = platform.processor() or platform.machine()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    shown = f"{cpus} cores" if cpus == os.cpu_count() else f"{cpus} of its {os.cpu_count()} cores"  # pinned (lanes)
    return f"{name} ({shown}), Python {platform.python_version()}, torch {torch.__version__}"


def write_table(args, machine: str, rows, load: float) -> None:
    lines = [f"Measured by `scripts/class_cost.py` on {machine}, "
             f"written {datetime.now(timezone.utc).isoformat(timespec='seconds')}, load average {load:.1f} at the start. "
             "Each class: copies of the reference solution and of the unmodified lab, alternating; paired = "
             "`--baseline-every 0` (the slow script beside every run), shared = the default.", "",
             "| chapter | mode | students | wall s | median s per student | verdicts as paired |",
             "|---|---|---:|---:|---:|---|"]
    lines += [f"| {c} | {m} | {n} | {w:.1f} | {s:.1f} | {'yes' if same else 'NO'} |" for c, m, n, w, s, same in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)

if __name__ == "__main__":
    raise SystemExit(main())
