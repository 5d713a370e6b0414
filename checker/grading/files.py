"""Files the grader writes for people (the gradebook, feedback): replaced whole, never seen half-written."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".partial"  # an interrupted write leaves `.<name>.<random>.partial`, removed by the next run


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (a crash right after it keeps the new name)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync it, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


def write_if_changed(path: Path, text: str) -> bool:
    """write_atomic, skipped when the file already holds exactly ``text``; True when it wrote."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    write_atomic(path, text)
    return True


def remove_partial_files(folder: Path) -> None:
    """Remove what interrupted atomic writes left (call with the ledger locked, so no write is under way)."""
    if folder.is_dir():
        for leftover in folder.glob(f".*{TEMP_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
