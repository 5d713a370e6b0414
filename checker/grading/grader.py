"""The grading loop: which students need grading, one worker per GPU (or CPU slot), a ledger record each.

Each student is graded in a process of its own (``checker.grading.task``), from a private scratch copy of
their folder, with a wall-clock limit, and its output read through a bounded tail: the grader's memory stays
flat whatever a submission prints. When the process ends, its record is appended to the ledger and the
gradebook and that student's feedback are rebuilt, with the ledger locked.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from checker.grader.baseline import BaselineBank
from checker.grading import ledger as ledger_mod
from checker.grading import processes
from checker.grading.gradebook import ERROR, rebuild
from checker.grading.submission import Student, TooLarge, copy_submission, shown_name

OUTPUT_TAIL_BYTES = 64 << 10     # what the grader keeps of a student's grading output: the last 64 KiB
RESULT_LIMIT_BYTES = 16 << 20    # a result larger than this is not a result
POLL_S = 0.5
# notes of a graded report that stay in its feedback and out of the gradebook's reason column: how the runs were
# isolated, where the baseline came from, which learner's jobs were drawn (the same for every student)
REPORT_ONLY_NOTES = ("isolation:", "baseline:", "assignment:")


@dataclass(frozen=True)
class Settings:
    """How this class is graded; the same for every worker and every Slurm task."""

    chapter: Any
    submissions: Path
    out: Path
    device: str
    trace_tool: str
    student_timeout_s: float
    max_submission_bytes: int
    workbook_version: str
    baseline_every: int | None = 5  # students between re-measurements of the shared baseline; None: none shared
    assignment: str | None = None   # the secret a chapter 08 class is graded under (assignment.fingerprint); else None

    @property
    def ledger_path(self) -> Path:
        return self.out / ledger_mod.LEDGER_NAME


def learner_for(settings: Settings, copy: Path) -> str:
    """Whose mystery jobs (chapter 08) a submission is graded against: the student's folder name under a course
    secret; under --practice (the public practice secret) the practice learner's, the jobs every learner's
    `workbook assign 08` hands out without a course secret and `workbook check 08` grades."""
    from checker.checks.triage import PRACTICE_LEARNER

    return PRACTICE_LEARNER if settings.assignment == "practice" else copy.name


@dataclass
class Slot:
    """Where one worker grades, one submission at a time: a GPU (``CUDA_VISIBLE_DEVICES``), the CPU, a Slurm task."""

    label: str
    env: dict[str, str] = field(default_factory=dict)


def default_student_timeout(chapter, device: str) -> float:
    """Every run a check may make (the timed pairs, two traced runs, one spare), each at its own limit, plus a minute."""
    cfg = chapter.config(device)
    per_run = float(os.environ.get("WORKBOOK_TIMEOUT_S") or cfg.get("timeout_s", 300))
    return per_run * (2 * int(cfg.get("trials", 3)) + 3) + 60


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _scrub(value: Any, replacements: list[tuple[str, str]]) -> Any:
    """The record as it would read from any scratch folder: its random paths replaced by the student's name."""
    text = json.dumps(value)
    for old, new in replacements:
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    return json.loads(text)


class Grader:
    def __init__(self, settings: Settings, slots: list[Slot], class_hashes: dict[str, str],
                 progress: Callable[[str], None] = lambda line: None):
        self.settings, self.slots, self.class_hashes = settings, slots, dict(class_hashes)
        self.progress = progress
        self._spawn_lock = threading.Lock()       # spawning a task and sweeping orphans never overlap
        self._active: dict[int, subprocess.Popen] = {}
        self._stopping = threading.Event()
        self._done = 0
        self._done_lock = threading.Lock()
        self.graded: list[str] = []
        # per worker: the slow script's speed, measured for its first student and shared (checker.grader.baseline)
        self.banks: dict[str, dict | None] = {slot.label: self._new_bank() for slot in slots}
        self.scratch_root = Path(tempfile.mkdtemp(prefix=f"workbook-grade-{settings.chapter.id}-"))
        os.chmod(self.scratch_root, 0o711)  # runs may traverse to their own folder, not list the others

    def _new_bank(self) -> dict | None:
        every = self.settings.baseline_every
        return None if every is None else BaselineBank(every=every).to_json()

    def bank_summaries(self) -> list[str]:
        """One line per worker that measured the slow script's speed: its runs, median and spread."""
        lines = []
        for label, data in self.banks.items():
            summary = BaselineBank.from_json(data).summary() if data else None
            if summary:
                lines.append(f"{label}: {summary}")
        return lines

    # -- the pool -------------------------------------------------------------------------------------
    def run(self, students: list[Student]) -> None:
        processes.become_subreaper()  # orphans of a killed grading process come back here, to be killed
        todo: queue.Queue[Student] = queue.Queue()
        for student in students:
            todo.put(student)
        self._total = len(students)
        errors: list[BaseException] = []

        def work(slot: Slot) -> None:
            try:
                while not self._stopping.is_set():
                    try:
                        student = todo.get_nowait()
                    except queue.Empty:
                        return
                    self._grade_and_record(student, slot)
            except BaseException as err:  # noqa: BLE001 - handed to the main thread, which re-raises it
                errors.append(err)
                self._stopping.set()

        threads = [threading.Thread(target=work, args=(slot,), name=slot.label, daemon=True) for slot in self.slots]
        for thread in threads:
            thread.start()
        try:
            while any(thread.is_alive() for thread in threads):
                for thread in threads:
                    thread.join(timeout=POLL_S)
        except BaseException:  # KeyboardInterrupt, SIGTERM: stop every student now, record nothing half-done
            self.stop()
            for thread in threads:
                thread.join(timeout=10)
            raise
        finally:
            shutil.rmtree(self.scratch_root, ignore_errors=True)
        if errors:
            raise errors[0]

    def stop(self) -> None:
        self._stopping.set()
        with self._spawn_lock:
            for pid in list(self._active):
                processes.kill_group(pid)
                processes.kill_tree(pid)
                processes.kill_quietly(pid)

    # -- one student ----------------------------------------------------------------------------------
    def _grade_and_record(self, student: Student, slot: Slot) -> None:
        record = self.grade_one(student, slot)
        if record is None or self._stopping.is_set():
            return  # interrupted: nothing is recorded, the next run grades this student again
        s = self.settings
        with ledger_mod.locked(s.ledger_path) as ledger:
            ledger.append(record)
            self.class_hashes.setdefault(student.name, record["submission_sha256"])
            rebuild(s.out, s.chapter, self.class_hashes, ledger_mod.latest_by_key(ledger.records()), s.device,
                    s.trace_tool, s.assignment)
        with self._done_lock:
            self._done += 1
            self.graded.append(student.name)
            number = self._done
        summary = record["verdict"]
        if record["verdict"] == "failed":
            summary += " (" + ", ".join(record.get("failed_checks", [])) + ")"
        elif record["verdict"] == ERROR:
            summary += f": {record['reason'][:160]}"
        self.progress(f"[{number}/{self._total}] {shown_name(student.name)}: {summary}  ({record['wall_s']:.0f} s, {slot.label})")

    def grade_one(self, student: Student, slot: Slot) -> dict[str, Any] | None:
        """Grade one student; their ledger record, or None when the grader is stopping."""
        s = self.settings
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix="s-", dir=self.scratch_root))
        os.chmod(scratch, 0o755)
        copy = scratch / student.name
        base = {"student": student.name, "chapter": s.chapter.id, "device": s.device, "trace_tool": s.trace_tool,
                "workbook_version": s.workbook_version, "host": socket.gethostname(), "worker": slot.label,
                "gpu_name": "", "cells": {}, "speedup": None, "report": None, "notes": [], "failed_checks": [],
                "assignment": s.assignment}
        try:
            try:
                sha = copy_submission(student.folder, copy, s.max_submission_bytes)
            except TooLarge as err:
                return self._error(base, self.class_hashes.get(student.name, ""), str(err), started)
            result, failure = self._run_task(copy, scratch, slot)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if self._stopping.is_set():
            return None
        if failure is not None:
            return self._error(base, sha, failure, started)
        result = _scrub(result, [(str(copy), student.name), (str(scratch), "<scratch>")])
        record = dict(base, submission_sha256=sha, gpu_name=result.get("gpu_name", ""))
        left = int(result.get("leftover_processes") or 0)
        if left:
            record["notes"].append(f"left {left} process{'' if left == 1 else 'es'} running after its runs ended; "
                                   "the grader killed them")
        if result["kind"] == "error":
            reason = result["reason"]
            if reason.startswith(f"--submission {student.name}: "):  # evaluate's words for `workbook check`
                reason = f"{student.name}/: " + reason[len(f"--submission {student.name}: "):]
            detail = result.get("detail") or ""  # the reason's words, then the offending line and a caret
            detail = reason + detail[len(result["reason"]):] if detail.startswith(result["reason"]) else None
            return self._error(record, sha, reason, started, detail)
        feedback = result["feedback"]
        if record["notes"]:
            feedback += "".join(f"\nnote: {note}\n" for note in record["notes"])
        # what the runs' grader saw besides the checks (a process left running): said in the reason column too
        seen = [n for n in result["report"].get("notes", []) if not n.startswith(REPORT_ONLY_NOTES)]
        record.update(verdict=result["verdict"], reason="; ".join(seen + record["notes"]), cells=result["cells"],
                      speedup=result["speedup"],
                      report=result["report"], feedback=feedback, failed_checks=result["failed_checks"],
                      wall_s=round(time.monotonic() - started, 1), graded_at=now_utc())
        return record

    def _error(self, base: dict, sha: str, reason: str, started: float, detail: str | None = None) -> dict[str, Any]:
        chapter = self.settings.chapter
        notes = "".join(f"\nnote: {note}\n" for note in base.get("notes", []))
        return dict(base, submission_sha256=sha, verdict=ERROR, reason=reason,
                    feedback=f"{chapter.id}: {chapter.title}\n\nyour submission could not be graded: "
                             f"{detail or reason}\n{notes}",
                    wall_s=round(time.monotonic() - started, 1), graded_at=now_utc())

    def _run_task(self, copy: Path, scratch: Path, slot: Slot) -> tuple[dict | None, str | None]:
        """Start the grading process for one copy; (its result, None) or (None, why it gave none)."""
        s = self.settings
        tmp = scratch / "tmp"
        tmp.mkdir(mode=0o755)
        worker_dir = self.scratch_root / f"worker-{abs(hash(slot.label))}"
        worker_dir.mkdir(mode=0o700, exist_ok=True)
        request = {"chapter": s.chapter.id, "submission": str(copy), "device": s.device, "trace_tool": s.trace_tool,
                   "worker_dir": str(worker_dir), "bank": self.banks.get(slot.label),
                   "learner": learner_for(s, copy)}  # whose mystery jobs (chapter 08) are graded
        read_end, write_end = os.pipe()
        env = dict(os.environ, **slot.env, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp),
                   WORKBOOK_GRADE_RESULT_FD=str(write_end), WORKBOOK_GRADE_PARENT=str(os.getpid()))
        try:
            with self._spawn_lock:
                if self._stopping.is_set():
                    os.close(read_end)
                    return None, "stopped"
                proc = subprocess.Popen([sys.executable, "-m", "checker.grading.task"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(write_end,),
                                        env=env, cwd=scratch, start_new_session=True)
                self._active[proc.pid] = proc
        finally:
            os.close(write_end)
        result, tail, timed_out = None, b"", False
        try:
            try:
                proc.stdin.write(json.dumps(request).encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass
            result, tail, timed_out = self._watch(proc, read_end, time.monotonic() + s.student_timeout_s)
        finally:
            os.close(read_end)
            processes.kill_group(proc.pid)  # whatever is left of its process group
            left_behind = processes.kill_tree(proc.pid)
            proc.kill()
            proc.wait()
            proc.stdout.close()
            with self._spawn_lock:
                del self._active[proc.pid]
                # grandchildren of a killed grading process were re-parented here (we are a subreaper)
                left_behind += processes.kill_tree(os.getpid(), spare=frozenset(self._active))
        if result is not None and isinstance(result.get("bank"), dict):
            self.banks[slot.label] = result["bank"]  # what the slow script's runs measured for this student
        if timed_out:
            return None, (f"grading took longer than {s.student_timeout_s:.0f} s, the limit for one student "
                          f"(--student-timeout); it was stopped (a hang? an endless loop?)")
        if result is not None:
            return result, None
        code = proc.returncode
        how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exit {code}"
        last = (tail.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1][:300]
        return None, (f"the grading process ended without a result ({how}): {last}; if the submission is not the "
                      f"cause, grade it again with --only")

    def _watch(self, proc: subprocess.Popen, result_fd: int, deadline: float) -> tuple[dict | None, bytes, bool]:
        """Read the result pipe and the output (keeping only its tail) until the process is done or time is up."""
        selector = selectors.DefaultSelector()
        output_fd = proc.stdout.fileno()
        selector.register(output_fd, selectors.EVENT_READ)
        selector.register(result_fd, selectors.EVENT_READ)
        result, tail = bytearray(), bytearray()
        result_open = True
        try:
            while True:
                if self._stopping.is_set():
                    return None, bytes(tail), False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, bytes(tail), True
                for key, _ in selector.select(timeout=min(remaining, POLL_S)):
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        selector.unregister(key.fd)
                        result_open = result_open and key.fd != result_fd
                    elif key.fd == result_fd:
                        if len(result) < RESULT_LIMIT_BYTES:
                            result += data
                    else:
                        tail += data
                        del tail[:-OUTPUT_TAIL_BYTES]
                if not result_open and proc.poll() is not None:
                    break
        finally:
            selector.close()
        try:
            parsed = json.loads(result) if result else None
        except ValueError:
            parsed = None
        return (parsed if isinstance(parsed, dict) and "kind" in parsed else None), bytes(tail), False
