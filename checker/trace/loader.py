"""Open a trace, whatever it is: detect the format from the content and hand it to its reader.

Accepted: a Kineto JSON trace (``.json`` or gzipped; UTF-8 with or without a byte-order mark, or UTF-16
with one), a TensorBoard trace folder holding one, an nsys SQLite export (``.sqlite``, or gzipped), and an
``.nsys-rep`` report (exported on the fly when nsys is installed). The file name's ending is only a hint;
the first bytes decide.

Only regular files are opened (a FIFO, a device or a socket named ``trace.json`` would block or never
end), and a folder is searched no deeper than ``MAX_FOLDER_ENTRIES`` entries, so a wrong path fails at
once instead of hanging.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import tempfile
import zlib
from pathlib import Path

import pandas as pd

from checker.trace.errors import TraceError

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
MAX_FOLDER_ENTRIES = 100_000  # entries looked at when searching a folder for its trace
ACCEPTED = "a torch.profiler trace (.json, .json.gz, or a TensorBoard trace folder), an nsys SQLite export (.sqlite) or an .nsys-rep"


def _kind_of_bytes(head: bytes, name: str) -> str | None:
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(b"NVIDIA") and b"Profiler Report" in head[:64]:
        return "nsys-rep"
    if head.startswith(UTF16_BOMS):
        text = head[2:].decode("utf-16-be" if head.startswith(b"\xfe\xff") else "utf-16-le", "ignore").lstrip()
        return "kineto-utf16" if text.startswith("{") else None
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    if text.startswith(b"{"):
        return "kineto"
    if name.endswith((".nsys-rep", ".qdrep")):
        return "nsys-rep"
    return None


def open_regular(path: Path):
    """Open a regular file for reading in binary; anything else (a FIFO, a device, a socket) is refused
    without blocking on it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise TraceError(f"{path}: cannot open it ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            raise TraceError(f"{path}: {what}, not a trace file; pass the trace file itself")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def detect(path: Path) -> tuple[str, bool]:
    """(format, gzipped) of a trace file: format is 'kineto', 'kineto-utf16', 'nsys-sqlite' or 'nsys-rep'."""
    with open_regular(path) as raw:
        try:
            head = raw.read(64)
            if not head:
                raise TraceError(f"{path}: the file is empty; it is not a trace")
            gz = head.startswith(GZIP_MAGIC)
            if gz:
                raw.seek(0)
                with gzip.GzipFile(fileobj=raw, mode="rb") as fh:
                    head = fh.read(64)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path}: cannot read it ({exc})") from None
    kind = _kind_of_bytes(head, path.name.lower().removesuffix(".gz"))
    if kind is None:
        raise TraceError(f"{path}: not a trace; expected {ACCEPTED}")
    return kind, gz


def find_in_folder(folder: Path) -> Path:
    """The one Kineto trace in a folder (e.g. what tensorboard_trace_handler wrote), searched recursively
    (symbolic links to folders are not followed; at most MAX_FOLDER_ENTRIES entries are looked at)."""
    found, seen = [], 0
    for root, dirs, files in os.walk(folder, onerror=None, followlinks=False):
        seen += len(dirs) + len(files)
        if seen > MAX_FOLDER_ENTRIES:
            raise TraceError(f"{folder}: the folder holds more than {MAX_FOLDER_ENTRIES:,} files and folders; "
                             "pass the trace file itself")
        dirs.sort()
        for name in files:
            if name.endswith((".json", ".json.gz")):
                p = Path(root) / name
                if p.is_file():  # follows a link; a FIFO or a device is no trace
                    found.append(p)
    found.sort()
    preferred = [p for p in found if ".pt.trace." in p.name]
    found = preferred or found
    if not found:
        raise TraceError(f"{folder}: the folder holds no trace (*.json or *.json.gz); pass a trace file")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in found[:3])
        raise TraceError(f"{folder}: the folder holds {len(found)} traces ({names}{', ...' if len(found) > 3 else ''}); "
                         "pass one of them")
    return found[0]


def read_events(path: str | Path) -> tuple[pd.DataFrame, dict, str]:
    """(events, metadata, format) of a trace file or folder; raises TraceError for anything else.

    ``metadata["warnings"]`` lists what the reader had to leave out or guess (one sentence each)."""
    path = Path(path)
    try:
        is_dir = path.is_dir()
        exists = is_dir or path.exists()
    except (OSError, ValueError) as exc:  # a name too long, a loop of links, a NUL in the name, ...
        raise TraceError(f"{path}: cannot look at it ({getattr(exc, 'strerror', None) or exc})") from None
    if is_dir:
        path = find_in_folder(path)
    elif not exists:
        raise TraceError(f"{path}: no such file or folder")
    kind, gz = detect(path)
    if kind.startswith("kineto"):
        from checker.trace.kineto import read_kineto

        encoding = "utf-16" if kind == "kineto-utf16" else "utf-8-sig"  # a byte-order mark is dropped
        try:
            with open_regular(path) as raw:
                binary = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
                with io.TextIOWrapper(binary, encoding=encoding) as stream:
                    events, meta = read_kineto(stream, str(path))
        except (OSError, EOFError, zlib.error, UnicodeError) as exc:
            raise TraceError(f"{path}: the file is cut off or corrupt ({exc.__class__.__name__}: {exc})") from None
        return events, meta, "kineto"

    from checker.trace.nsys import export_report, read_nsys_sqlite

    with tempfile.TemporaryDirectory(prefix="workbook-trace-") as tmp:
        db = path
        if gz:
            db = Path(tmp) / path.name.removesuffix(".gz")
            try:
                with open_regular(path) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as src, open(db, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except (OSError, EOFError, zlib.error) as exc:
                raise TraceError(f"{path}: the gzip file is cut off or corrupt ({exc})") from None
        if kind == "nsys-rep":
            db = export_report(path, Path(tmp))
        events, meta = read_nsys_sqlite(db, str(path))
    return events, meta, "nsys"
