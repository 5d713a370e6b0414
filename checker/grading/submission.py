"""A class's submissions: who is in it, what each handed in (a hash), and a private copy of it to grade.

The grader never runs anything inside a submission folder and never writes there: each student is graded
from a scratch copy the grader makes (regular files only: symlinks, sockets and FIFOs are left out, and so are
``__pycache__`` folders). The hash is over the same files, so it names exactly what was graded.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from checker.base.errors import WorkbookError

SKIPPED_DIRS = {"__pycache__", ".git"}
CHUNK = 1 << 20


@dataclass(frozen=True)
class Student:
    name: str
    folder: Path


def shown_name(name: str) -> str:
    """A student's folder name as a terminal line shows it: as is, or, when it holds a newline or another
    control character (a folder may be called anything), escaped and quoted, as Python writes it: 'bo\\nb'.
    The gradebook and the ledger keep the name itself; only what is printed is escaped."""
    return name if name.isprintable() else repr(name)


def find_students(submissions: Path, lab_file: str) -> tuple[list[Student], list[str]]:
    """One student per folder (dot-folders left out); also the names of stray files beside them."""
    if not submissions.is_dir():
        raise WorkbookError(f"{submissions}: not a folder of submissions")
    students, strays = [], []
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir() and not entry.is_symlink():
            students.append(Student(entry.name, entry))
        else:
            strays.append(entry.name)
    if not students:
        raise WorkbookError(f"{submissions} holds no submission folders (one folder per student, each with {lab_file})")
    return students, strays


class TooLarge(Exception):
    """The submission folder holds more than the grader copies."""


def _files(folder: Path) -> list[tuple[str, Path]]:
    """(relative path, path) of every regular file under ``folder``, sorted; symlinks are not followed."""
    found = []
    for parent, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not os.path.islink(os.path.join(parent, d)))
        for name in files:
            path = Path(parent) / name
            try:
                if not stat.S_ISREG(path.lstat().st_mode) or name.endswith(".pyc"):
                    continue
            except FileNotFoundError:
                continue
            found.append((path.relative_to(folder).as_posix(), path))
    return sorted(found)


def _digest(files: list[tuple[str, bytes]]) -> str:
    whole = hashlib.sha256()
    for relative, content_digest in files:
        whole.update(relative.encode("utf-8", "surrogateescape") + b"\0" + content_digest + b"\n")
    return whole.hexdigest()


def submission_hash(folder: Path) -> str:
    """sha256 over the relative paths and contents of the files a grading would copy."""
    digests = []
    for relative, path in _files(folder):
        content = hashlib.sha256()
        try:
            with path.open("rb") as handle:
                for chunk in iter(lambda: handle.read(CHUNK), b""):
                    content.update(chunk)
        except OSError:
            continue
        digests.append((relative, content.digest()))
    return _digest(digests)


def copy_submission(folder: Path, destination: Path, max_bytes: int) -> str:
    """Copy the submission's files into ``destination`` (made here), owned by this process, not writable by
    others; returns the hash of what was copied. Raises TooLarge past ``max_bytes``."""
    destination.mkdir(mode=0o755)
    os.chmod(destination, 0o755)
    total = 0
    digests = []
    for relative, path in _files(folder):
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        content = hashlib.sha256()
        try:
            mode = 0o755 if path.lstat().st_mode & 0o111 else 0o644
            with path.open("rb") as source, open(target, "wb") as sink:
                for chunk in iter(lambda: source.read(CHUNK), b""):
                    total += len(chunk)
                    if total > max_bytes:
                        raise TooLarge(f"the submission folder holds more than {max_bytes >> 20} MB; "
                                       f"the grader copies at most that (--max-submission-mb)")
                    content.update(chunk)
                    sink.write(chunk)
        except OSError:
            continue  # unreadable: left out of the copy and of the hash alike
        os.chmod(target, mode)
        digests.append((relative, content.digest()))
    return _digest(digests)


def protect_tree(root: Path) -> int:
    """As root: make every entry under ``root`` owned by root and not group- or world-writable, so that
    graded code (run as an unprivileged user) cannot write there. Returns how many entries changed."""
    if os.geteuid() != 0 or not root.exists():
        return 0
    changed = 0
    entries = [root] + [Path(parent) / name for parent, dirs, files in os.walk(root, followlinks=False)
                        for name in dirs + files]
    for path in entries:
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid != 0:
                os.lchown(path, 0, 0)
                changed += 1
            continue
        touched = False
        if info.st_uid != 0 or info.st_gid != 0:
            os.lchown(path, 0, 0)
            touched = True
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
            touched = True
        changed += touched
    return changed
