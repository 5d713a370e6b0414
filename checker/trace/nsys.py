"""Nsight Systems SQLite exports -> the normalized event table.

Tables read (each only when present): CUPTI_ACTIVITY_KIND_RUNTIME (CUDA runtime and driver calls),
CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_GRAPH_TRACE and NVTX_EVENTS, with names from StringIds.
Numeric codes are turned into words by joining the export's own enum tables (ENUM_CUDA_MEMCPY_OPER,
ENUM_CUDA_MEM_KIND, ENUM_CUPTI_SYNC_TYPE, ENUM_NSYS_EVENT_TYPE), never by numbers written here, since they change
between versions. API names lose their version suffix (cudaStreamSynchronize_v3020 -> cudaStreamSynchronize),
and copies get the names torch.profiler gives them ("Memcpy HtoD (Pageable -> Device)") so that the
two formats of one program compare name for name.

CUDA graphs: nsys traces a replayed graph as one whole-graph row (CUPTI_ACTIVITY_KIND_GRAPH_TRACE) unless it ran
with ``--cuda-graph-trace=node``; the kernels inside are then not in CUPTI_ACTIVITY_KIND_KERNEL. Each such row
becomes one GPU activity named ``CUDA graph <graphId>`` (of kind ``kernel``), so the GPU's busy time, the
timeline and the kernel table count the graph's time instead of calling the GPU idle through it. With node
tracing the kernels carry a graph node id and the whole-graph rows, if any, are left out (never counted twice).

Damaged exports: SQLite keeps any value in any column, so every number is checked. A row whose start or
end is not an integer (text, a blob, NULL) is left out; an id that is not an integer is taken as missing;
a name id missing from StringIds gets a stand-in name; each with a warning in ``metadata["warnings"]``.
An export without StringIds is refused (nothing in it could be named, so no host sync could be told),
and one without the enum tables keeps its copies with an unknown direction or memory kind, said in a
warning, rather than counting them as neither pageable nor pinned in silence.

A ``.nsys-rep`` report is first exported with ``nsys export --type sqlite``, using the nsys found on
PATH or named by the WORKBOOK_NSYS environment variable; an export still running after 300 s
(WORKBOOK_NSYS_EXPORT_TIMEOUT_S) is stopped and said in one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from checker.base.tools import find_tool
from checker.trace.errors import TraceError
from checker.trace.events import DTYPES, MISSING, categorical, copy_kind_of, finish, mem_kind_of

CUDA_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET")
EXPORT_HINT = "nsys export --type sqlite --output REPORT.sqlite REPORT.nsys-rep"
EXPORT_TIMEOUT_ENV = "WORKBOOK_NSYS_EXPORT_TIMEOUT_S"
EXPORT_TIMEOUT_S = 300.0  # a big report exports in a minute or two; past this, nsys is taken to hang


def export_report(report: Path, out_dir: Path) -> Path:
    """Run ``nsys export --type sqlite`` on a .nsys-rep; returns the .sqlite path."""
    nsys = find_tool("nsys")
    if nsys is None:
        how = EXPORT_HINT.replace("REPORT", report.with_suffix("").name)
        named = os.environ.get("WORKBOOK_NSYS")
        why = f"WORKBOOK_NSYS={named} is not an executable file" if named else "not on PATH, WORKBOOK_NSYS unset"
        raise TraceError(f"{report}: reading an .nsys-rep needs Nsight Systems, and nsys was not found "
                         f"({why}); export it where nsys is installed "
                         f"with `{how}` and pass the .sqlite file")
    out = out_dir / (report.stem + ".sqlite")
    limit = _export_timeout()
    try:
        proc = subprocess.Popen([nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
                                 "--output", str(out), str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True)
    except OSError as err:  # executable, yet not a program this machine runs (another architecture, no #!)
        raise TraceError(f"{report}: could not start {nsys} ({err.strerror or err}); point WORKBOOK_NSYS or PATH "
                         "at a working nsys") from None
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except BaseException as exc:  # a hang, or Ctrl-C: leave no nsys behind
        _stop(proc)
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        how = EXPORT_HINT.replace("REPORT", report.with_suffix("").name)
        raise TraceError(f"{report}: `nsys export --type sqlite` did not finish within {limit:g} s; export it by "
                         f"hand with `{how}` and pass the .sqlite file, or raise {EXPORT_TIMEOUT_ENV}") from None
    if proc.returncode != 0 or not out.exists():
        last = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        raise TraceError(f"{report}: `nsys export --type sqlite` failed: {last[0]}")
    return out


def _stop(proc: subprocess.Popen) -> None:
    """Kill nsys and whatever it started (its own session); never wait on a pipe a straggler may hold."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()


def _export_timeout() -> float:
    text = os.environ.get(EXPORT_TIMEOUT_ENV)
    if not text:
        return EXPORT_TIMEOUT_S
    try:
        limit = float(text)
    except ValueError:
        limit = 0.0
    if not limit > 0:
        raise TraceError(f"{EXPORT_TIMEOUT_ENV}={text}: give a number of seconds above 0")
    return limit


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
    rows = db.execute(f"SELECT id, {name}, {label} FROM {table}").fetchall()
    ids, _bad = _int_column([r[0] for r in rows])
    return {int(i): (_str(symbol), _str(text)) for i, (_, symbol, text) in zip(ids, rows) if i != MISSING}


def _str(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _int_column(column) -> tuple[np.ndarray, np.ndarray]:
    """A column's values as int64, MISSING where NULL or not an integer; and where a value was there but was
    not an integer (text, a blob, a fraction, a number beyond 64 bits)."""
    column = list(column)
    try:
        values = np.array(column, dtype=np.int64)
        if values.shape == (len(column),) and not any(type(v) is not int for v in column):
            return values, np.zeros(len(column), dtype=bool)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full(len(column), MISSING, dtype=np.int64)
    bad = np.zeros(len(column), dtype=bool)
    for i, v in enumerate(column):
        if v is None:
            continue
        if type(v) is int and -(1 << 63) < v < (1 << 63):
            out[i] = v
        elif type(v) is float and v.is_integer() and abs(v) < 2.0 ** 62:
            out[i] = int(v)
        else:
            bad[i] = True
    return out, bad


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
    rows = db.execute("SELECT id, value FROM StringIds").fetchall()
    ids, _bad = _int_column([r[0] for r in rows])
    return {int(i): _str(r[1]) for i, r in zip(ids, rows) if i != MISSING}


class _Rows:
    """The rows of one table, those with a usable start and end only; what was left out, in warnings."""

    def __init__(self, db, sql: str, table: str, warnings: list[str]):
        rows = db.execute(sql).fetchall()
        self.table, self.warnings = table, warnings
        self.said: set[int] = set()  # columns already warned of: one warning per column, however often it is read
        self.columns = list(zip(*rows)) if rows else []
        self.keep = np.ones(len(rows), dtype=bool)
        self.start = self.end = np.empty(0, dtype=np.int64)
        if rows:
            start, _ = _int_column(self.columns[0])
            end, _ = _int_column(self.columns[1])
            self.keep = (start != MISSING) & (end != MISSING)
            dropped = int((~self.keep).sum())
            if dropped:
                example = next(v for v, k in zip(zip(self.columns[0], self.columns[1]), self.keep) if not k)
                warnings.append(f"{dropped:,} of {len(rows):,} rows of {table} had a start or end that is not an "
                                f"integer (e.g. {_short(example)}); they were left out")
            self.start, self.end = start[self.keep], end[self.keep]
        self.n = int(self.keep.sum())

    def __len__(self) -> int:
        return self.n

    def _column(self, i: int, what: str) -> np.ndarray:
        values, bad = _int_column(self.columns[i])
        values, bad = values[self.keep], bad[self.keep]
        if bad.any() and i not in self.said:
            self.said.add(i)
            self.warnings.append(f"{int(bad.sum()):,} rows of {self.table} had a {what} that is not an integer; "
                                 "taken as missing")
        return values

    def ints(self, i: int, what: str) -> np.ndarray:
        """Column i as int64, -1 where missing (a NULL, or a value that is not an integer: then a warning)."""
        values = self._column(i, what)
        return np.where(values == MISSING, -1, values)

    def nullable(self, i: int, what: str) -> pd.arrays.IntegerArray:
        values = self._column(i, what)
        return pd.arrays.IntegerArray(np.where(values == MISSING, 0, values), values == MISSING)

    def texts(self, i: int) -> list:
        return [v for v, k in zip(self.columns[i], self.keep) if k]


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _names(ids: np.ndarray, strings: dict[int, str], table: str, placeholder: str, warnings: list[str]):
    """(names, codes) for a column of StringIds ids; ids StringIds lacks get a placeholder and a warning."""
    unique, codes = np.unique(ids, return_inverse=True)
    names, missing = [], 0
    counts = np.bincount(codes, minlength=len(unique))
    for k, i in enumerate(unique):
        name = strings.get(int(i))
        if name is None:
            missing += int(counts[k])
            name = f"<{placeholder} {i}>"
        names.append(name)
    if missing:
        warnings.append(f"{missing:,} rows of {table} name a string id that StringIds does not hold; they have no "
                        "name, so what they are (a host sync, a launch) cannot be told")
    return names, codes


def _runtime(db, strings, warnings) -> pd.DataFrame:
    rows = _Rows(db, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
                 "CUPTI_ACTIVITY_KIND_RUNTIME", warnings)
    if not len(rows):
        return pd.DataFrame()
    names, codes = _names(rows.ints(4, "nameId"), strings, "CUPTI_ACTIVITY_KIND_RUNTIME", "string", warnings)
    names = [_strip_version(n) for n in names]
    gtid = rows.ints(2, "globalTid")
    return _frame("cuda_api", names, codes, rows.start, rows.end, _pid(gtid), _tid(gtid),
                  correlation=rows.nullable(3, "correlationId"))


def _strip_version(name: str) -> str:
    """cudaStreamSynchronize_v3020 -> cudaStreamSynchronize."""
    head, sep, tail = name.rpartition("_v")
    return head if sep and tail.isdigit() else name


def _gpu(db, table: str, name_sql: str, warnings: list[str], extra_sql: str = "") -> _Rows:
    return _Rows(db, f"SELECT start, end, globalPid, deviceId, streamId, correlationId, {name_sql}"
                     f"{', ' + extra_sql if extra_sql else ''} FROM {table}", table, warnings)


def _gpu_frame(kind: str, rows: _Rows, names: list[str], codes, **extra) -> pd.DataFrame:
    stream = rows.ints(4, "streamId")
    return _frame(kind, names, codes, rows.start, rows.end, _pid(rows.ints(2, "globalPid")), stream,
                  device=rows.nullable(3, "deviceId"), stream=rows.nullable(4, "streamId"),
                  correlation=rows.nullable(5, "correlationId"), **extra)


def _kernels(db, strings, tables, warnings) -> pd.DataFrame:
    cols = _columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_KERNEL", name_col, warnings)
    if not len(rows):
        return pd.DataFrame()
    names, codes = _names(rows.ints(6, name_col), strings, "CUPTI_ACTIVITY_KIND_KERNEL", "kernel", warnings)
    return _gpu_frame("kernel", rows, names, codes)


GRAPH_PREFIX = "CUDA graph "  # names the whole-graph rows: checker.trace.analyses.kernels gives them a family


def _node_kernel_starts(db, tables) -> dict:
    """Per device, the sorted starts of the kernels traced one by one inside graphs (--cuda-graph-trace=node)."""
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables or not {"graphNodeId", "deviceId"} <= _columns(
            db, "CUPTI_ACTIVITY_KIND_KERNEL"):
        return {}
    found: dict = {}
    for start, device in db.execute("SELECT start, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT "
                                    "NULL AND typeof(start) = 'integer'"):
        found.setdefault(device if isinstance(device, int) else None, []).append(start)
    return {device: np.sort(np.array(starts, dtype=np.int64)) for device, starts in found.items()}


def _graphs(db, tables, warnings) -> pd.DataFrame:
    """Whole-graph rows, but for a replay whose kernels were traced one by one (a kernel with a graph node id starts
    inside it, on its device): that one is already counted, kernel by kernel."""
    cols = _columns(db, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    missing = sorted({"start", "end", "globalPid", "deviceId", "streamId", "correlationId"} - cols)
    if missing:  # an optional table: the rest of the export is still worth reading
        warnings.append(f"the export's CUPTI_ACTIVITY_KIND_GRAPH_TRACE has no {', '.join(missing)} column, so its CUDA "
                        "graph replays were left out (the GPU looks idle through them)")
        return pd.DataFrame()
    has_id = "graphId" in cols
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "graphId" if has_id else "NULL", warnings)
    if not len(rows):
        return pd.DataFrame()
    ids = rows.ints(6, "graphId") if has_id else np.full(len(rows), -1)
    labels = [f"{GRAPH_PREFIX}{g}" if g >= 0 else f"{GRAPH_PREFIX}(no id)" for g in ids]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    frame = _gpu_frame("kernel", rows, list(names), codes)
    node_starts = _node_kernel_starts(db, tables)
    if node_starts:
        devices = rows.ints(3, "deviceId")
        inside = np.zeros(len(frame), dtype=bool)
        for device, starts in node_starts.items():
            mine = (devices == device) if device is not None else np.ones(len(frame), dtype=bool)
            first = np.searchsorted(starts, rows.start, side="left")
            inside |= mine & (first < len(starts)) & (starts[np.minimum(first, len(starts) - 1)] <= rows.end)
        frame = frame[~inside].reset_index(drop=True)
    return frame


def _memcpys(db, tables, warnings) -> pd.DataFrame:
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind", warnings, "bytes, srcKind, dstKind")
    if not len(rows):
        return pd.DataFrame()
    for table, what in (("ENUM_CUDA_MEMCPY_OPER", "direction (host to device, ...)"),
                        ("ENUM_CUDA_MEM_KIND", "memory kinds (pageable, pinned, ...)")):
        if table not in tables:
            warnings.append(f"the export has no {table} table, so the {what} of its {len(rows):,} copies cannot "
                            "be told")
    opers = _enum(db, tables, "ENUM_CUDA_MEMCPY_OPER")
    mem = _enum(db, tables, "ENUM_CUDA_MEM_KIND")
    copy = [copy_kind_of(_word(opers, k)) for k in rows.ints(6, "copyKind")]
    src = [mem_kind_of(_word(mem, k)) for k in rows.ints(8, "srcKind")]
    dst = [mem_kind_of(_word(mem, k)) for k in rows.ints(9, "dstKind")]
    labels = [f"Memcpy {c} ({_label(s)} -> {_label(d)})" for c, s, d in zip(copy, src, dst)]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return _gpu_frame("memcpy", rows, list(names), codes, bytes=rows.nullable(7, "bytes"),
                      copy_kind=pd.Categorical(copy, dtype=DTYPES["copy_kind"]),
                      src_kind=pd.Categorical(src, dtype=DTYPES["src_kind"]),
                      dst_kind=pd.Categorical(dst, dtype=DTYPES["dst_kind"]))


def _label(kind: str) -> str:
    """'pageable' -> 'Pageable', 'device_static' -> 'Device Static' (torch.profiler's spelling)."""
    return kind.replace("_", " ").title()


def _memsets(db, tables, warnings) -> pd.DataFrame:
    cols = _columns(db, "CUPTI_ACTIVITY_KIND_MEMSET")
    has_kind = "memKind" in cols
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_MEMSET", "bytes", warnings, "memKind" if has_kind else "")
    if not len(rows):
        return pd.DataFrame()
    mem = _enum(db, tables, "ENUM_CUDA_MEM_KIND")
    dst = [mem_kind_of(_word(mem, k)) for k in rows.ints(7, "memKind")] if has_kind else ["unknown"] * len(rows)
    labels = [f"Memset ({_label(d)})" for d in dst]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return _gpu_frame("memset", rows, list(names), codes, bytes=rows.nullable(6, "bytes"),
                      dst_kind=pd.Categorical(dst, dtype=DTYPES["dst_kind"]))


def _syncs(db, tables, warnings) -> pd.DataFrame:
    rows = _gpu(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "syncType", warnings)
    if not len(rows):
        return pd.DataFrame()
    types = _enum(db, tables, "ENUM_CUPTI_SYNC_TYPE")
    labels = [types.get(k, ("", f"sync type {k}"))[1] or f"sync type {k}" for k in rows.ints(6, "syncType")]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    return _gpu_frame("sync", rows, list(names), codes)


def _nvtx(db, strings, tables, warnings, unterminated: dict[str, int]) -> pd.DataFrame:
    """Push/pop and start/end NVTX ranges (marks are left out; so are unterminated ranges, whose ``end`` is NULL,
    counted by name in ``unterminated`` so that the step finder can say which steps they were)."""
    types = _enum(db, tables, "ENUM_NSYS_EVENT_TYPE")
    wanted = [i for i, (name, label) in types.items()
              if name in ("NvtxPushPopRange", "NvtxStartEndRange") or label in ("NvtxPushPopRange", "NvtxStartEndRange")]
    if not wanted:
        if db.execute("SELECT 1 FROM NVTX_EVENTS LIMIT 1").fetchone():
            warnings.append("the export's ENUM_NSYS_EVENT_TYPE table is missing or names no NVTX range type, so its "
                            "NVTX ranges (the steps among them) could not be read")
        return pd.DataFrame()
    cols = _columns(db, "NVTX_EVENTS")
    text_id = "textId" if "textId" in cols else "NULL"
    for text, text_key, count in db.execute(f"SELECT text, {text_id}, count(*) FROM NVTX_EVENTS WHERE end IS NULL "
                                            f"AND eventType IN ({', '.join(map(str, wanted))}) GROUP BY 1, 2"):
        label = _str(text) if text is not None else strings.get(text_key, "") if type(text_key) is int else ""
        unterminated[label] = unterminated.get(label, 0) + int(count)
    rows = _Rows(db, f"SELECT start, end, globalTid, text, {text_id} FROM NVTX_EVENTS "
                     f"WHERE end IS NOT NULL AND eventType IN ({', '.join(map(str, wanted))})", "NVTX_EVENTS", warnings)
    if not len(rows):
        return pd.DataFrame()
    ids = rows.ints(4, "textId")
    labels = [_str(t) if t is not None else strings.get(int(i), "") if i >= 0 else ""
              for t, i in zip(rows.texts(3), ids)]
    names, codes = np.unique(np.array(labels, dtype=object), return_inverse=True)
    gtid = rows.ints(2, "globalTid")
    return _frame("range", list(names), codes, rows.start, rows.end, _pid(gtid), _tid(gtid))


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
    if "StringIds" not in tables:
        raise TraceError(f"{label}: the nsys export has no StringIds table, so its CUDA calls and kernels have no "
                         f"names and no host sync could be told; export the report again with `{EXPORT_HINT}`")
    warnings: list[str] = []
    strings = _strings(db, tables)
    parts = [_runtime(db, strings, warnings)]
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        parts.append(_kernels(db, strings, tables, warnings))
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        parts.append(_graphs(db, tables, warnings))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        parts.append(_memcpys(db, tables, warnings))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        parts.append(_memsets(db, tables, warnings))
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        parts.append(_syncs(db, tables, warnings))
    unterminated: dict[str, int] = {}
    if "NVTX_EVENTS" in tables:
        parts.append(_nvtx(db, strings, tables, warnings, unterminated))
    parts = [p for p in parts if len(p)]
    meta = {"tables": sorted(t for t in tables if t.startswith(("CUPTI_", "NVTX_", "OSRT_"))),
            "unterminated_ranges": unterminated}
    if "META_DATA_EXPORT" in tables:
        meta.update({str(k): v for k, v in db.execute("SELECT name, value FROM META_DATA_EXPORT")
                     if k in ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION")})
    meta["warnings"] = warnings
    if not parts:
        return finish(pd.DataFrame()), meta
    return finish(_concat(parts)), meta


def _concat(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-table frames, merging their name categories."""
    names = pd.Index(sorted({str(n) for p in parts for n in p["name"].cat.categories}), dtype=object)
    for p in parts:
        p["name"] = p["name"].cat.set_categories(names)
    return pd.concat(parts, ignore_index=True, sort=False)
