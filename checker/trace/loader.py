"""Open a trace, whatever it is: detect the format from the content and hand it to its reader.

Accepted: a Kineto JSON trace (``.json`` or gzipped), a TensorBoard trace folder holding one, an nsys
SQLite export (``.sqlite``, or gzipped), and an ``.nsys-rep`` report (exported on the fly when nsys is
installed). The file name's ending is only a hint; the first bytes decide.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import zlib
from pathlib import Path

import pandas as pd

from checker.trace.errors import TraceError

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
ACCEPTED = "a torch.profiler trace (.json, .json.gz, or a TensorBoard trace folder), an nsys SQLite export (.sqlite) or an .nsys-rep"


def _kind_of_bytes(head: bytes, name: str) -> str | None:
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(b"NVIDIA") and b"Profiler Report" in head[:64]:
        return "nsys-rep"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        return "kineto"
    if name.endswith((".nsys-rep", ".qdrep")):
        return "nsys-rep"
    return None


def detect(path: Path) -> tuple[str, bool]:
    """(format, gzipped) of a trace file: format is 'kineto', 'nsys-sqlite' or 'nsys-rep'."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
        if not head:
            raise TraceError(f"{path}: the file is empty; it is not a trace")
        gz = head.startswith(GZIP_MAGIC)
        if gz:
            with gzip.open(path, "rb") as fh:
                head = fh.read(64)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(f"{path}: cannot read it ({exc})") from None
    kind = _kind_of_bytes(head, path.name.lower().removesuffix(".gz"))
    if kind is None:
        raise TraceError(f"{path}: not a trace; expected {ACCEPTED}")
    return kind, gz


def find_in_folder(folder: Path) -> Path:
    """The one Kineto trace in a folder (e.g. what tensorboard_trace_handler wrote), searched recursively."""
    found = sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
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
    """(events, metadata, format) of a trace file or folder; raises TraceError for anything else."""
    path = Path(path)
    if path.is_dir():
        path = find_in_folder(path)
    elif not path.exists():
        raise TraceError(f"{path}: no such file or folder")
    kind, gz = detect(path)
    if kind == "kineto":
        from checker.trace.kineto import read_kineto

        opener = (lambda: gzip.open(path, "rt", encoding="utf-8")) if gz else (lambda: open(path, encoding="utf-8"))
        try:
            with opener() as stream:
                events, meta = read_kineto(stream, str(path))
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
            raise TraceError(f"{path}: the file is cut off or corrupt ({exc.__class__.__name__}: {exc})") from None
        return events, meta, "kineto"

    from checker.trace.nsys import export_report, read_nsys_sqlite

    with tempfile.TemporaryDirectory(prefix="workbook-trace-") as tmp:
        db = path
        if gz:
            db = Path(tmp) / path.name.removesuffix(".gz")
            try:
                with gzip.open(path, "rb") as src, open(db, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except (OSError, EOFError, zlib.error) as exc:
                raise TraceError(f"{path}: the gzip file is cut off or corrupt ({exc})") from None
        if kind == "nsys-rep":
            db = export_report(path, Path(tmp))
        events, meta = read_nsys_sqlite(db, str(path))
    return events, meta, "nsys"
