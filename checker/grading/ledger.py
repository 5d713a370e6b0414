"""The ledger: one JSON line per graded submission, appended, flushed and fsynced; the one source of truth.

``gradebook.csv`` and the feedback files are rebuilt from it, so a grader killed at any moment loses at most
the student it was grading, and a rerun resumes. Several writers (one worker per GPU, Slurm array tasks on
other hosts sharing the folder) append to the same file: each append, and each rebuild of what is derived
from the ledger, happens under an exclusive ``fcntl.flock`` on the ledger itself. (On NFS, flock is mapped to
byte-range locks by Linux's NFSv4 client; Lustre and GPFS support it when mounted with ``flock``.)

A record is keyed by student, chapter, the hash of the submission's files, device, trace tool and, for a chapter
that draws each learner's assignment from a secret (chapter 08), which secret (``assignment.fingerprint``); the latest
record of a key wins. A line cut short by a crash is ignored, and the next append starts on a fresh line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any, Iterator

from checker.base.errors import WorkbookError

LEDGER_NAME = "ledger.jsonl"
SCHEMA = 1
KEY_FIELDS = ("student", "chapter", "submission_sha256", "device", "trace_tool", "assignment")


def record_key(record: dict[str, Any]) -> tuple:
    return tuple(record.get(name) for name in KEY_FIELDS)


class LockedLedger:
    """The ledger while this process holds its lock: read it, append to it."""

    def __init__(self, fd: int, path: Path):
        self._fd, self.path = fd, path

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(dict(record, schema=SCHEMA), sort_keys=True, ensure_ascii=False) + "\n"
        data = line.encode("utf-8")
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # the last append was cut short: start a fresh line
        view = memoryview(data)
        while view:  # O_APPEND: every write lands at the end
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.path)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[LockedLedger]:
    """Hold the ledger's exclusive lock (blocking until other writers are done)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _refuse_if_not_a_file(path)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield LockedLedger(fd, path)
    finally:
        os.close(fd)  # closing releases the lock


def _refuse_if_not_a_file(path: Path) -> None:
    """A folder (or a FIFO: reading it would wait forever) where the ledger belongs: one line saying so, not
    "Is a directory" and a resume hint that cannot work."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError:
        return  # the read or open says what is wrong
    if not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise WorkbookError(f"{path}: is {what}, not the grading ledger; move it out of the way (this run graded "
                            "nothing), then run the same command again")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete record, in the order written; a cut-short or damaged line is skipped."""
    _refuse_if_not_a_file(Path(path))
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    records = []
    lines = data.split(b"\n")
    for line in lines[:-1]:  # what follows the last newline was never finished
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("schema") == SCHEMA:
            records.append(record)
    return records


def latest_by_key(records: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    latest: dict[tuple, dict[str, Any]] = {}
    for record in records:
        latest[record_key(record)] = record
    return latest
