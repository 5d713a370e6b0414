"""Grading on a Slurm cluster: an array job whose tasks grade their share of the class into the shared ledger.

    workbook grade 01 submissions/ --out grades/ --slurm [--sbatch-arg=--partition=gpu ...] [--wait]
    workbook grade 01 submissions/ --out grades/ --collect        # once the job is done

The submitting command writes ``grades/slurm/<stamp>/plan.json`` (who each task grades, and how) and
``grade.sbatch`` beside it, then runs ``sbatch --array``. Each task (``python -m checker.grading.slurm PLAN``)
grades its students one after another on the one GPU Slurm gave it (``--gres=gpu:1``; none on the CPU), each
exactly as a local run would, appending to ``grades/ledger.jsonl`` under its lock. The output folder, the
submissions and the checkout must be on a file system every node mounts at the same path.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from checker.base.errors import WorkbookError
from checker.base.paths import repo_root
from checker.grading.submission import shown_name

SLURM_DIR = "slurm"
POLL_S = 2.0


def _plans(out: Path) -> list[Path]:
    return sorted((out / SLURM_DIR).glob("*/plan.json"))


def job_is_active(job_id: str) -> bool:
    if shutil.which("squeue") is None:
        return False
    proc = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i"], capture_output=True, text=True, timeout=60)
    return proc.returncode == 0 and bool(proc.stdout.strip())


def refuse_if_a_job_is_grading(settings) -> None:
    """Two graders on one ledger would grade the same students twice (and share GPUs): refuse while a job runs."""
    for plan in _plans(settings.out):
        try:
            job_id = json.loads(plan.read_text()).get("job_id")
        except (OSError, ValueError):
            continue
        if job_id and job_is_active(str(job_id)):
            raise WorkbookError(f"Slurm job {job_id} is still grading into {settings.out}; wait for it "
                                f"(squeue -j {job_id}), or cancel it (scancel {job_id}), then run this again "
                                "(--collect builds the gradebook from what is done so far)")


def shares(names: list[str], shards: int | None) -> list[list[str]]:
    """One task per student, or ``shards`` tasks taking students in turn."""
    if not shards or shards >= len(names):
        return [[name] for name in names]
    if shards < 1:
        raise WorkbookError("--shards must be at least 1")
    return [names[i::shards] for i in range(shards)]


def write_batch_script(plan_dir: Path, settings, tasks: int, students_per_task: int) -> Path:
    minutes = math.ceil((settings.student_timeout_s * students_per_task + 300) / 60)
    lines = [
        "#!/bin/bash",
        f"# Written by `workbook grade {settings.chapter.id} ... --slurm` on {socket.gethostname()}: one array task "
        "per share of the class;",
        "# each task grades its students one after another and appends their records to the shared ledger.",
        f"#SBATCH --job-name=workbook-grade-{settings.chapter.id}",
        f"#SBATCH --array=0-{tasks - 1}",
        "#SBATCH --ntasks=1",
        f"#SBATCH --time={minutes}",
        f"#SBATCH --output={plan_dir}/task-%A_%a.out",
    ]
    if settings.device == "cuda":
        lines.append("#SBATCH --gres=gpu:1")
    lines += ["set -euo pipefail", f"export WORKBOOK_ROOT={shlex.quote(str(repo_root()))}",
              "export PYTHONDONTWRITEBYTECODE=1"]
    if os.environ.get("PYTHONPATH"):
        lines.append(f"export PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])}")
    lines += ['cd "$WORKBOOK_ROOT"',
              f"exec {shlex.quote(sys.executable)} -m checker.grading.slurm {shlex.quote(str(plan_dir / 'plan.json'))}"]
    script = plan_dir / "grade.sbatch"
    script.write_text("\n".join(lines) + "\n")
    return script


def submit_and_maybe_wait(settings, grading_class, todo, sbatch_args: list[str], shards: int | None, wait: bool,
                          say: Callable[[str], None]):
    """Submit the array job for ``todo``; with ``wait``, wait for it and return the gradebook's rows."""
    from checker.grading.classroom import settings_to_json

    refuse_if_a_job_is_grading(settings)
    if not todo:
        say("nothing to grade: every submission is graded as it is now (--force grades them again)")
        return grading_class.rebuild()
    if shutil.which("sbatch") is None:
        raise WorkbookError("--slurm: sbatch not found on PATH; run this on a Slurm login node (or grade here "
                            "without --slurm)")
    grading_class.rebuild()
    tasks = shares([student.name for student in todo], shards)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    plan_dir = settings.out / SLURM_DIR / stamp
    plan_dir.mkdir(parents=True)
    plan = {"settings": settings_to_json(settings), "tasks": tasks, "job_id": None}
    plan_path = plan_dir / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=2))
    script = write_batch_script(plan_dir, settings, len(tasks), max(len(share) for share in tasks))
    command = ["sbatch", "--parsable", *sbatch_args, str(script)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise WorkbookError(f"sbatch refused the job: {last} (the script is {script})")
    job_id = proc.stdout.strip().split(";")[0]
    plan["job_id"] = job_id
    plan_path.write_text(json.dumps(plan, indent=2))
    say(f"submitted Slurm job {job_id}: {len(tasks)} array task(s) grading {len(todo)} submission(s); "
        f"batch script {script}")
    if not wait:
        print(f"submitted Slurm job {job_id}. Follow it with `squeue -j {job_id}`; when it is done, "
              f"`workbook grade {settings.chapter.id} {settings.submissions} --out {settings.out} --collect` "
              "builds the gradebook (so does the same grade command).")
        return None
    try:
        while job_is_active(job_id):
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        raise WorkbookError(f"stopped waiting; Slurm job {job_id} goes on. Collect it later with --collect") from None
    say(f"Slurm job {job_id} is done")
    return grading_class.rebuild()


def run_task(plan_path: Path) -> int:
    """One array task: grade this task's share of the class (SLURM_ARRAY_TASK_ID picks it)."""
    from checker.grading.classroom import GradingClass, settings_from_json
    from checker.grading.grader import Grader, Slot

    plan = json.loads(plan_path.read_text())
    index = int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    settings = settings_from_json(plan["settings"])
    grading_class = GradingClass(settings)
    share = set(plan["tasks"][index])
    students = [student for student in grading_class.students if student.name in share]
    label = f"slurm {os.environ.get('SLURM_ARRAY_JOB_ID', '?')}_{index} on {socket.gethostname()}"
    print(f"{label}: grading {', '.join(map(shown_name, sorted(share)))}", flush=True)
    grader = Grader(settings, [Slot(label=label)], grading_class.hashes, lambda line: print(line, flush=True))
    grader.run(students)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m checker.grading.slurm PLAN.json (started by the batch script `workbook grade "
              "--slurm` writes)", file=sys.stderr)
        return 2
    try:
        return run_task(Path(argv[0]))
    except WorkbookError as err:
        print(f"workbook: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
