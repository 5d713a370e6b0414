"""Grade a class: every submission of one chapter, a ledger, a gradebook (CSV) and a feedback file per student.

    workbook grade 01 submissions/ --out grades/            # resumable: run it again after any interruption
    workbook grade 01 submissions/ --out grades/ --gpus 0,1 # one worker per GPU
    workbook grade 01 submissions/ --out grades/ --slurm    # an array job; then --collect (or --wait)

The layers, one module each:

* ``submission``: who is in the class, the hash of what each handed in, the scratch copy that is graded;
* ``ledger``: one JSON line per graded submission, appended under a lock: the one source of truth;
* ``gradebook``: gradebook.csv, feedback files and the summary, rebuilt from the ledger after each student;
* ``grader``: the workers (one per GPU or CPU slot) and the process per student, with its time limit;
* ``task``: that process, the only caller of ``checker.grader.evaluate`` in this layer;
* ``slurm``: the array job, its tasks, and waiting for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable

from checker.base.errors import WorkbookError
from checker.grader import sandbox
from checker.grading import ledger as ledger_mod
from checker.grading.files import remove_partial_files
from checker.grading.gradebook import FEEDBACK_DIR, GRADEBOOK_NAME, PENDING, Summary, current_record, rebuild
from checker.grading.grader import Grader, Settings, Slot, default_student_timeout
from checker.grading.submission import Student, find_students, protect_tree, submission_hash
from checker.base.paths import repo_root

# checks whose CPU thresholds rest on timing: grading several submissions at once on one CPU would skew them
# (triage's CPU rules are a wait share and host time per op; step_cost holds a step's CPU time to the slow script's,
# which a neighbour's load moves: an honest chapter 00 pair once came 1.58x apart on a loaded runner)
TIMED_CHECKS = ("throughput", "data_wait", "triage", "step_cost")


def timed_cpu_checks(chapter) -> list[str]:
    """The checks of ``chapter`` whose CPU verdicts rest on timing (TIMED_CHECKS with a CPU threshold): where there
    are any, its submissions are graded one at a time on a CPU."""
    return [c.name for c in chapter.checks if c.name in TIMED_CHECKS and c.threshold_for("cpu") is not None]


@lru_cache(maxsize=1)
def workbook_version() -> str:
    """The package version, plus the git commit of the checkout (and ``.dirty`` when it has local changes)."""
    import re

    version = "unknown"
    try:
        text = (repo_root() / "pyproject.toml").read_text()
        found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
        version = found.group(1) if found else version
    except OSError:
        pass
    try:
        sha = subprocess.run(["git", "-C", str(repo_root()), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if sha.returncode == 0 and sha.stdout.strip():
            version += f"+g{sha.stdout.strip()}"
            dirty = subprocess.run(["git", "-C", str(repo_root()), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=30)
            if dirty.returncode == 0 and dirty.stdout.strip():
                version += ".dirty"
    except (OSError, subprocess.SubprocessError):
        pass
    return version


def visible_gpus() -> list[str]:
    """The names of the CUDA GPUs torch sees here, asked in a subprocess (the grader itself never imports torch)."""
    code = ("import json, torch; print(json.dumps([torch.cuda.get_device_name(i) for i in "
            "range(torch.cuda.device_count())] if torch.cuda.is_available() else []))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return []


def choose_device(requested: str | None, gpu_names: Callable[[], list[str]]) -> str:
    if requested == "cpu":
        return "cpu"
    if gpu_names():
        return "cuda"
    if requested == "cuda":
        raise WorkbookError("--device cuda: this machine has no CUDA GPU that torch can use; try --device cpu")
    return "cpu"


CPUS_ENV = "WORKBOOK_CPUS"  # the CPUs a GPU worker's grading (and every run it starts) is pinned to


def plan_slots(chapter, device: str, gpus: str | None, workers: int | None, gpu_names: list[str]) -> list[Slot]:
    """The workers' slots (``_slots``), each with a user id of its own for its runs where several grade at once
    and the grader is root: one student's run cannot signal, trace or outnumber (its process cap) another's."""
    slots = _slots(chapter, device, gpus, workers, gpu_names)
    if len(slots) > 1 and sandbox.running_as_root():
        for slot, uid in zip(slots, sandbox.worker_uids(len(slots))):
            slot.env[sandbox.RUN_UID_ENV] = str(uid)
    return slots


def _slots(chapter, device: str, gpus: str | None, workers: int | None, gpu_names: list[str]) -> list[Slot]:
    """One slot per GPU on CUDA (``--gpus``, default all visible); on the CPU, ``--workers`` slots (default 1).

    A data-parallel chapter's job runs ``world_size`` ranks (chapter.toml): on CUDA a slot is then that many GPUs,
    taken in order from ``--gpus`` (each student's job gets them all, one student after another); on the CPU each
    worker's job runs that many processes, so the workers' ranks together may not outnumber the CPUs."""
    from checker.grader.ranks import world_size

    world = world_size(chapter.config(device))
    if device == "cpu":
        if gpus is not None:
            raise WorkbookError("--gpus picks GPUs, and this grading runs on the CPU (no CUDA GPU, or --device cpu); "
                                "to grade several submissions at once on the CPU, use --workers N")
        count = workers or 1
        if count < 1:
            raise WorkbookError("--workers must be at least 1")
        timed = timed_cpu_checks(chapter)
        if count > 1 and timed:
            raise WorkbookError(f"--workers {count}: {chapter.id} times its CPU checks ({', '.join(timed)}), and "
                                f"submissions graded side by side on one CPU would slow each other; use --workers 1")
        cpus = len(os.sched_getaffinity(0))
        if world > 1 and count * world > cpus:
            raise WorkbookError(f"--workers {count}: each job of {chapter.id} runs {world} ranks, one process each, "
                                f"and this machine gives the grader {cpus} CPU(s); use --workers {max(cpus // world, 1)}")
        return [Slot(label="cpu" if count == 1 else f"cpu worker {i}") for i in range(count)]
    if workers is not None:
        raise WorkbookError("--workers is for CPU grading; on CUDA, --gpus 0,1,... runs one worker per GPU")
    if gpus is None:
        indices = list(range(len(gpu_names)))
    else:
        try:
            indices = [int(part) for part in gpus.split(",") if part.strip()]
        except ValueError:
            raise WorkbookError(f"--gpus {gpus}: give GPU indices separated by commas, such as --gpus 0,1") from None
        bad = [i for i in indices if not 0 <= i < len(gpu_names)]
        if bad or not indices or len(set(indices)) != len(indices):
            raise WorkbookError(f"--gpus {gpus}: this machine has {len(gpu_names)} visible GPU(s), numbered "
                                f"0 to {len(gpu_names) - 1}; name each once")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [part.strip() for part in visible.split(",")] if visible else None
    if len(indices) < world:
        raise WorkbookError(f"{chapter.id} runs each job on {world} GPUs, and {len(indices)} "
                            f"{'is' if len(indices) == 1 else 'are'} given: name {world} or more with --gpus, or grade "
                            "on the CPU (--device cpu)")
    groups = [indices[n:n + world] for n in range(0, len(indices) - world + 1, world)]  # a leftover GPU stays idle
    shares = cpu_shares(sorted(os.sched_getaffinity(0)), len(groups))
    slots = []
    for n, group in enumerate(groups):
        label = (f"gpu {group[0]} ({gpu_names[group[0]]})" if world == 1 else
                 f"gpus {','.join(map(str, group))} ({', '.join(gpu_names[i] for i in group)})")
        slots.append(Slot(label=label, env={"CUDA_VISIBLE_DEVICES": ",".join(ids[i] if ids else str(i) for i in group),
                                            **({CPUS_ENV: ",".join(map(str, shares[n]))} if shares else {})}))
    return slots


def cpu_shares(cpus: list[int], workers: int) -> list[list[int]] | None:
    """The CPUs split into ``workers`` disjoint runs of neighbours, as even as can be, one per GPU worker: so that
    one student's loader workers and host threads do not slow the timed window of the student graded on the next
    GPU (None where there are fewer CPUs than workers: nothing is pinned)."""
    if workers < 2 or len(cpus) < workers:
        return None
    size, extra = divmod(len(cpus), workers)
    shares, start = [], 0
    for n in range(workers):
        end = start + size + (1 if n < extra else 0)
        shares.append(cpus[start:end])
        start = end
    return shares


def settings_to_json(settings: Settings) -> dict:
    return {"chapter": settings.chapter.id, "submissions": str(settings.submissions), "out": str(settings.out),
            "device": settings.device, "trace_tool": settings.trace_tool,
            "student_timeout_s": settings.student_timeout_s, "max_submission_bytes": settings.max_submission_bytes,
            "workbook_version": settings.workbook_version, "baseline_every": settings.baseline_every,
            "assignment": settings.assignment}


def settings_from_json(data: dict) -> Settings:
    from checker.base.chapters import get_chapter

    return Settings(chapter=get_chapter(data["chapter"]), submissions=Path(data["submissions"]),
                    out=Path(data["out"]), device=data["device"], trace_tool=data["trace_tool"],
                    student_timeout_s=float(data["student_timeout_s"]),
                    max_submission_bytes=int(data["max_submission_bytes"]), workbook_version=data["workbook_version"],
                    baseline_every=data.get("baseline_every", 5), assignment=data.get("assignment"))


class GradingClass:
    """A class folder as it is now: its students and the hash of each submission."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.students, self.strays = find_students(settings.submissions, settings.chapter.lab_file)
        self.hashes = {student.name: submission_hash(student.folder) for student in self.students}

    def select(self, only: list[str] | None = None) -> list[Student]:
        if not only:
            return list(self.students)
        names = {student.name for student in self.students}
        unknown = [name for name in only if name not in names]
        if unknown:
            raise WorkbookError(f"--only {','.join(unknown)}: no such student folder in {self.settings.submissions}")
        return [student for student in self.students if student.name in only]

    def needing_grading(self, only: list[str] | None = None, force: bool = False) -> list[Student]:
        """Resume: a student needs grading when no record matches their submission as it is now (always with
        --force; with --only, the named students are graded again even when unchanged)."""
        chosen = self.select(only)
        if force or only:
            return chosen
        s = self.settings
        latest = ledger_mod.latest_by_key(ledger_mod.read_records(s.ledger_path))
        return [student for student in chosen
                if current_record(latest, s.chapter.id, student.name, self.hashes[student.name], s.device,
                                  s.trace_tool, s.assignment) is None]

    def earlier_output(self) -> str | None:
        """What an earlier grading of another chapter or class left in --out, that this one would replace
        (gradebook.csv and the feedback files are rebuilt whole from the ledger, for this class), and what to do:
        a line for the instructor. None for a new folder, and for a resume or a regrade: the ledger holds a record
        of this chapter for a student of this class (graded on any device, with any trace tool or secret: such a
        regrade is the same class's, and the ledger keeps every earlier record), or nothing was graded yet (a run
        stopped before its first student leaves pending rows)."""
        s = self.settings
        feedback = s.out / FEEDBACK_DIR
        has_feedback = feedback.is_dir() and any(feedback.glob("*.md"))
        if not (s.out / GRADEBOOK_NAME).exists() and not has_feedback:
            return None
        records = ledger_mod.read_records(s.ledger_path)
        if not records:
            if has_feedback or _graded_rows(s.out / GRADEBOOK_NAME):
                return (f"holds {GRADEBOOK_NAME} or feedback/ files and no ledger to rebuild them from; grade into "
                        "a new folder, or pass --force to replace them (they would be lost)")
            return None
        if any(r.get("chapter") == s.chapter.id and r.get("student") in self.hashes for r in records):
            return None
        chapters = sorted({str(r.get("chapter")) for r in records} - {s.chapter.id})
        how = f"of chapter {', '.join(chapters)}" if chapters else "of other students (another submissions folder)"
        return (f"holds the gradebook and feedback of a grading {how}; grade into a new folder, or pass --force "
                "to replace them (the ledger keeps every record)")

    def rebuild(self) -> list[dict]:
        """gradebook.csv and the feedback files from the ledger as it is now (repairs what a kill interrupted)."""
        s = self.settings
        with ledger_mod.locked(s.ledger_path) as ledger:
            remove_partial_files(s.out)
            remove_partial_files(s.out / FEEDBACK_DIR)
            return rebuild(s.out, s.chapter, self.hashes, ledger_mod.latest_by_key(ledger.records()), s.device,
                           s.trace_tool, s.assignment)


def _graded_rows(gradebook: Path) -> bool:
    """Whether a gradebook.csv holds anything but pending rows (one that is not a gradebook, or cannot be read,
    is taken to: it is not ours to replace)."""
    import csv

    try:
        with gradebook.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is None:  # empty
                return False
            if not {"student", "verdict"} <= set(reader.fieldnames):
                return True
            return any(row.get("verdict") != PENDING for row in reader)
    except (OSError, UnicodeDecodeError, csv.Error):
        return gradebook.exists()


def prepare_out(settings: Settings) -> int:
    """Make the output folder; as root, make it and the submissions root-owned and not writable by others.
    Returns how many entries had to change."""
    out = settings.out
    try:
        out.resolve().relative_to(settings.submissions.resolve())
    except ValueError:
        pass
    else:
        raise WorkbookError(f"--out {out}: it is inside the submissions folder, where it would be taken for a "
                            "student; put it elsewhere")
    try:
        (out / FEEDBACK_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WorkbookError(f"--out {out}: cannot create it ({err.strerror})") from None
    if not os.access(out, os.W_OK):
        raise WorkbookError(f"--out {out}: not writable by this user")
    return protect_tree(out) + protect_tree(settings.submissions)


def grade_locally(settings: Settings, grading: GradingClass, students: list[Student], slots: list[Slot],
                  progress: Callable[[str], None]) -> list[dict]:
    grading.rebuild()
    if students:
        grader = Grader(settings, slots, grading.hashes, progress)
        grader.run(students)
        for line in grader.bank_summaries():
            progress(f"baseline, {line}")
    return grading.rebuild()


__all__ = ["GradingClass", "Settings", "Slot", "Summary", "choose_device", "default_student_timeout",
           "grade_locally", "plan_slots", "prepare_out", "settings_from_json", "settings_to_json",
           "visible_gpus", "workbook_version"]
