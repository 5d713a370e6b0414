"""Nsight Systems SQLite exports -> the normalized event table.

Tables read (each only when present): CUPTI_ACTIVITY_KIND_RUNTIME (CUDA runtime and driver calls),
CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION and NVTX_EVENTS, with names from StringIds. Numeric codes are
turned into words by joining the export's own enum tables (ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND,
ENUM_CUPTI_SYNC_TYPE, ENUM_NSYS_EVENT_TYPE), never by numbers written here, since they change between
versions. API names lose their version suffix (cudaStreamSynchronize_v3020 -> cudaStreamSynchronize),
and copies get the names torch.profiler gives them ("Memcpy HtoD (Pageable -> Device)") so that the
two formats of one program compare name for name.

A ``.nsys-rep`` report is first exported with ``nsys export --type sqlite``, using the nsys found on
PATH or named by the WORKBOOK_NSYS environment variable.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from checker.tools import find_tool
from checker.trace.errors import TraceError
from checker.trace.events import DTYPES, categorical, copy_kind_of, finish, mem_kind_of

CUDA_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET")
EXPORT_HINT = "nsys export --type sqlite --output REPORT.sqlite REPORT.nsys-rep"


def export_report(report: Path, out_dir: Path) -> Path:
    """Run ``nsys export --type sqlite`` on a .nsys-rep; returns the .sqlite path."""
    nsys = find_tool("nsys")
    if nsys is None:
        how = EXPORT_HINT.replace("REPORT", report.with_suffix("").name)
        raise TraceError(f"{report}: reading an .nsys-rep needs Nsight Systems, and nsys was not found "
                         f"(not on PATH, WORKBOOK_NSYS unset or wrong); export it where nsys is installed "
                         f"with `{how}` and pass the .sqlite file")
    out = out_dir / (report.stem + ".sqlite")
    done = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
                           "--output", str(out), str(report)], capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TraceError(f"{report}: `nsys export --type sqlite` failed: {last[0]}")
    return out


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _enum(db: sqlite3.Connection, tables: set[str], table: str) -> dict[int, tuple[str, str]]:
    """id -> (name, label) of one of the export's enum tables ({} when it is absent)."""
    if table not in tables:
        return {}
    cols = _columns(db, table)
    name = "name" if "name" in cols else "label"
    label = "label" if "label" in cols else name
    rows = db.execute(f"SELECT id, {name}, {label} FROM {table}")
    return {int(i): (str(symbol or ""), str(text or "")) for i, symbol, text in rows}


def _word(enum: dict[int, tuple[str, str]], code: int) -> str:
    """An enum value's symbol name, or its label when the export has no names ('' when unknown)."""
    name, label = enum.get(int(code), ("", ""))
    return name or label


def _pid(global_id: np.ndarray) -> np.ndarray:
    """nsys packs the process id into bits 24-47 of a global thread/process id."""
    return (global_id >> 24) & 0xFFFFFF


def _tid(global_tid: np.ndarray) -> np.ndarray:
    return global_tid & 0xFFFFFF


def _frame(kind: str, names: list[str], name_codes, start, end, pid, tid, **extra) -> pd.DataFrame:
    frame = pd.DataFrame({
        "kind": pd.Categorical([kind] * len(start), dtype=DTYPES["kind"]),
        "name": categorical(name_codes, names),
        "start_ns": np.asarray(start, dtype=np.int64),
        "end_ns": np.asarray(end, dtype=np.int64),
        "pid": np.asarray(pid, dtype=np.int64),
        "tid": np.asarray(tid, dtype=np.int64),
    })
    for column, values in extra.items():
        frame[column] = values
    return frame


def _strings(db: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    if "StringIds" not in tables:
        return {}
    return dict(db.execute("SELECT id, value FROM StringIds"))


def _fetch(db: sqlite3.Connection, sql: str) -> np.ndarray:
    rows = db.execute(sql).fetchall()
    return np.array(rows, dtype=object) if rows else np.empty((0, 0), dtype=object)


def _ints(column) -> np.ndarray:
    return np.array([-1 if v is None else int(v) for v in column], dtype=np.int64)


def _nullable(column) -> pd.arrays.IntegerArray:
    values = np.array([0 if v is None else int(v) for v in column], dtype=np.int64)
    mask = np.array([v is None for v in column], dtype=bool)
    return pd.arrays.IntegerArray(values, mask)


def _runtime(db, strings) -> pd.DataFrame:
    rows = _fetch(db, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    if not len(rows):
        return pd.DataFrame()
    ids = _ints(rows[:, 4])
    unique, codes = np.unique(ids, return_inverse=True)
    names = [_strip_version(strings.get(int(i), f"<string {i}>")) for i in unique]
    gtid = _ints(rows[:, 2])
    return _frame("cuda_api", names, codes, _ints(rows[:, 0]), _ints(rows[:, 1]), _pid(gtid), _tid(gtid),
                  correlation=_nullable(rows[:, 3]))


def _strip_version(name: str) -> str:
    """cudaStreamSynchronize_v3020 -> cudaStreamSynchronize."""
    head, sep, tail = name.rpartition("_v")
    return head if sep and tail.isdigit() else name


def _gpu(db, table: str, name_sql: str, extra_sql: str = "") -> np.ndarray:
    return _fetch(db, f"SELECT start, end, globalPid, deviceId, streamId, correlationId, {name_sql}"
                      f"{', ' + extra_sql if extra_sql else ''} FROM {table}")


def _gpu_frame(kind: str, rows: np.ndarray, names: list[str], codes, **extra) -> pd.DataFrame:
    stream = _ints(rows[:, 4])
    return _frame(kind, names, codes, _ints(rows[:, 0]), _ints(rows[:, 1]), _pid(_ints(rows[:, 2])), stream,
                  device=_nullable(rows[:, 3]), stream=_nullable(rows[:, 4]), correlation=_nullable(rows[:, 5]),
                  **extra)


def _kernels(db, strings, tables) -> pd.DataFrame:
    cols = _columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_KERNEL", name_col)
    if not len(rows):
        return pd.DataFrame()
    unique, codes = np.unique(_ints(rows[:, 6]), return_inverse=True)
    names = [strings.get(int(i), f"<kernel {i}>") for i in unique]
    return _gpu_frame("kernel", rows, names, codes)


def _memcpys(db, tables) -> pd.DataFrame:
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind", "bytes, srcKind, dstKind")
    if not len(rows):
        return pd.DataFrame()
    opers = _enum(db, tables, "ENUM_CUDA_MEMCPY_OPER")
    mem = _enum(db, tables, "ENUM_CUDA_MEM_KIND")
    copy = [copy_kind_of(_word(opers, k)) for k in _ints(rows[:, 6])]
    src = [mem_kind_of(_word(mem, k)) for k in _ints(rows[:, 8])]
    dst = [mem_kind_of(_word(mem, k)) for k in _ints(rows[:, 9])]
    labels = [f"Memcpy {c} ({_label(s)} -> {_label(d)})" for c, s, d in zip(copy, src, dst)]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return _gpu_frame("memcpy", rows, list(names), codes, bytes=_nullable(rows[:, 7]),
                      copy_kind=pd.Categorical(copy, dtype=DTYPES["copy_kind"]),
                      src_kind=pd.Categorical(src, dtype=DTYPES["src_kind"]),
                      dst_kind=pd.Categorical(dst, dtype=DTYPES["dst_kind"]))


def _label(kind: str) -> str:
    """'pageable' -> 'Pageable', 'device_static' -> 'Device Static' (torch.profiler's spelling)."""
    return kind.replace("_", " ").title()


def _memsets(db, tables) -> pd.DataFrame:
    cols = _columns(db, "CUPTI_ACTIVITY_KIND_MEMSET")
    has_kind = "memKind" in cols
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_MEMSET", "bytes", "memKind" if has_kind else "")
    if not len(rows):
        return pd.DataFrame()
    mem = _enum(db, tables, "ENUM_CUDA_MEM_KIND")
    dst = [mem_kind_of(_word(mem, k)) for k in _ints(rows[:, 7])] if has_kind else ["unknown"] * len(rows)
    labels = [f"Memset ({_label(d)})" for d in dst]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return _gpu_frame("memset", rows, list(names), codes, bytes=_nullable(rows[:, 6]),
                      dst_kind=pd.Categorical(dst, dtype=DTYPES["dst_kind"]))


def _syncs(db, tables) -> pd.DataFrame:
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "syncType")
    if not len(rows):
        return pd.DataFrame()
    types = _enum(db, tables, "ENUM_CUPTI_SYNC_TYPE")
    labels = [types.get(k, ("", f"sync type {k}"))[1] or f"sync type {k}" for k in _ints(rows[:, 6])]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return _gpu_frame("sync", rows, list(names), codes)


def _nvtx(db, strings, tables) -> pd.DataFrame:
    """Push/pop and start/end NVTX ranges (marks and unterminated ranges are left out)."""
    types = _enum(db, tables, "ENUM_NSYS_EVENT_TYPE")
    wanted = [i for i, (name, label) in types.items()
              if name in ("NvtxPushPopRange", "NvtxStartEndRange") or label in ("NvtxPushPopRange", "NvtxStartEndRange")]
    if not wanted:
        return pd.DataFrame()
    cols = _columns(db, "NVTX_EVENTS")
    text_id = "textId" if "textId" in cols else "NULL"
    rows = _fetch(db, f"SELECT start, end, globalTid, text, {text_id} FROM NVTX_EVENTS "
                      f"WHERE end IS NOT NULL AND eventType IN ({', '.join(map(str, wanted))})")
    if not len(rows):
        return pd.DataFrame()
    labels = [t if t is not None else strings.get(i, "") if i is not None else "" for t, i in zip(rows[:, 3], rows[:, 4])]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    gtid = _ints(rows[:, 2])
    return _frame("range", list(names), codes, _ints(rows[:, 0]), _ints(rows[:, 1]), _pid(gtid), _tid(gtid))


def read_nsys_sqlite(path: Path, label: str) -> tuple[pd.DataFrame, dict]:
    """Read an nsys SQLite export: (events, metadata)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = _tables(db)
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{label}: not a readable SQLite file ({exc})") from None
    try:
        return _read(db, tables, label)
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{label}: the nsys export is damaged or of an unknown layout ({exc})") from None
    finally:
        db.close()


def _read(db: sqlite3.Connection, tables: set[str], label: str) -> tuple[pd.DataFrame, dict]:
    if "StringIds" not in tables and not tables & set(CUDA_TABLES) and "NVTX_EVENTS" not in tables:
        raise TraceError(f"{label}: a SQLite file, but not an nsys export (no StringIds, CUPTI or NVTX tables)")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        raise TraceError(f"{label}: this nsys export has no CUDA activity (no CUPTI_ACTIVITY_KIND_RUNTIME "
                         "table), so it was captured without CUDA tracing or without a GPU; capture with "
                         "`nsys profile -t cuda,nvtx,osrt ...` on a machine with a GPU, or use torch.profiler")
    strings = _strings(db, tables)
    parts = [_runtime(db, strings)]
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        parts.append(_kernels(db, strings, tables))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        parts.append(_memcpys(db, tables))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        parts.append(_memsets(db, tables))
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        parts.append(_syncs(db, tables))
    if "NVTX_EVENTS" in tables:
        parts.append(_nvtx(db, strings, tables))
    parts = [p for p in parts if len(p)]
    meta = {"tables": sorted(t for t in tables if t.startswith(("CUPTI_", "NVTX_", "OSRT_")))}
    if "META_DATA_EXPORT" in tables:
        meta.update({k: v for k, v in db.execute("SELECT name, value FROM META_DATA_EXPORT")
                     if k in ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION")})
    if not parts:
        return finish(pd.DataFrame()), meta
    return finish(_concat(parts)), meta


def _concat(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-table frames, merging their name categories."""
    names = pd.Index(sorted({str(n) for p in parts for n in p["name"].cat.categories}), dtype=object)
    for p in parts:
        p["name"] = p["name"].cat.set_categories(names)
    return pd.concat(parts, ignore_index=True, sort=False)
