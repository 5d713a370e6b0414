"""Kineto (torch.profiler) JSON traces -> the normalized event table.

The file is read in chunks and its ``traceEvents`` array decoded a batch at a time, so memory stays
bounded by the chunk size plus the table being built: an event the engine does not keep (flow arrows,
metadata, profiler overhead) never outlives its batch, and a kept event becomes one slot in a few typed
arrays, not a Python dict.

What each Kineto category becomes:

==========================================  =========  ==============================================
``cat``                                     kind       notes
==========================================  =========  ==============================================
cpu_op (Operator)                           cpu_op     ``ProfilerStep#N`` becomes a range
user_annotation                             range      record_function ranges, on the host thread
gpu_user_annotation                         range      the same range drawn on the GPU (device set)
cuda_runtime, cuda_driver (Runtime/Driver)  cuda_api
kernel                                      kernel
gpu_memcpy (Memcpy)                         memcpy     "Memcpy HtoD (Pageable -> Device)" is parsed
gpu_memset (Memset)                         memset     "Memset (Device)"
cuda_sync                                   sync
python_function                             python     needs ``with_stack=True``
==========================================  =========  ==============================================
"""

from __future__ import annotations

import array
import json
import re
from typing import IO

import numpy as np
import pandas as pd

from checker.trace.errors import TraceError
from checker.trace.events import (COPY_KINDS, DTYPES, KINDS, MEM_KINDS, MISSING, categorical, copy_kind_of,
                                  finish, mem_kind_of, nullable)

CHUNK_CHARS = 1 << 22  # characters decoded per batch

CATEGORY_KIND = {
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "range", "gpu_user_annotation": "range",
    "cuda_runtime": "cuda_api", "runtime": "cuda_api", "cuda_driver": "cuda_api", "driver": "cuda_api",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_sync": "sync",
    "python_function": "python",
}
_KIND_CODE = {kind: KINDS.index(kind) for kind in KINDS}
_CAT_CODE = {}
for _cat, _kind in CATEGORY_KIND.items():
    _CAT_CODE[_cat] = _KIND_CODE[_kind]
    _CAT_CODE[_cat.capitalize()] = _KIND_CODE[_kind]
_GPU_CATS = {"gpu_user_annotation", "kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "cuda_sync",
             "Kernel", "Memcpy", "Memset"}
_SPARSE_CATS = _GPU_CATS | {"cuda_runtime", "runtime", "Runtime", "cuda_driver", "driver", "Driver"}
_CPU_OP, _RANGE, _MEMCPY, _MEMSET, _PYTHON = (_KIND_CODE[k] for k in ("cpu_op", "range", "memcpy", "memset", "python"))
_COPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*\((\w[\w ]*?)\s*->\s*(\w[\w ]*?)\)")
_SET_NAME = re.compile(r"Memset\s*\((\w[\w ]*?)\)")
_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


class _Columns:
    """Typed, append-only columns for the events a trace keeps.

    Every kept event fills the six common columns; only GPU-related events (CUDA API calls, kernels,
    copies, sets, syncs, GPU ranges) fill the sparse ones, stored with the row they belong to.
    """

    def __init__(self) -> None:
        self.kind = array.array("b")
        self.name = array.array("i")
        self.ts = array.array("d")
        self.dur = array.array("d")
        self.pid = array.array("q")
        self.tid = array.array("q")
        self.row = array.array("q")          # sparse columns: the row they belong to
        self.device = array.array("q")
        self.stream = array.array("q")
        self.correlation = array.array("q")
        self.bytes = array.array("q")
        self.copy = array.array("b")
        self.src = array.array("b")
        self.dst = array.array("b")
        self.call_row = array.array("q")     # python rows with a CallFrom: the row, and the text's code
        self.call_code = array.array("i")
        self.call_names: dict[str, int] = {}
        self.names: dict[str, int] = {}
        self.ids: dict[object, int] = {}  # non-integer pid/tid values -> small negative ids

    def add_batch(self, events: list) -> None:
        """Keep the complete ('X') events of known categories; drop the rest."""
        names, cat_code, sparse_cats = self.names, _CAT_CODE, _SPARSE_CATS
        kind_append, name_append = self.kind.append, self.name.append
        ts_append, dur_append = self.ts.append, self.dur.append
        pid_append, tid_append = self.pid.append, self.tid.append
        for e in events:
            if e.get("ph") != "X":
                continue
            cat = e.get("cat")
            kind = cat_code.get(cat)
            if kind is None:
                continue
            name = e.get("name", "")
            code = names.get(name)
            if code is None:
                code = names[name] = len(names)
            if kind == _CPU_OP and name.startswith("ProfilerStep#"):
                kind = _RANGE
            pid, tid = e.get("pid", 0), e.get("tid", 0)
            if cat in sparse_cats:
                self._sparse(cat, kind, name, pid, tid, e.get("args") or {})
            elif kind == _PYTHON:
                args = e.get("args")
                caller = args.get("CallFrom") if args else None
                if caller:
                    self.call_row.append(len(self.kind))
                    self.call_code.append(self.call_names.setdefault(caller, len(self.call_names)))
            kind_append(kind)
            name_append(code)
            ts_append(e.get("ts", 0.0))
            dur_append(e.get("dur", 0.0))
            pid_append(pid if type(pid) is int else self._id(pid))
            tid_append(tid if type(tid) is int else self._id(tid))

    def _sparse(self, cat: str, kind: int, name: str, pid, tid, args: dict) -> None:
        self.row.append(len(self.kind))
        gpu = cat in _GPU_CATS
        device = args.get("device", pid) if gpu else None
        stream = args.get("stream", tid) if gpu else None
        corr, size = args.get("correlation"), args.get("bytes")
        self.device.append(device if type(device) is int else MISSING)
        self.stream.append(stream if type(stream) is int else MISSING)
        self.correlation.append(corr if type(corr) is int else MISSING)
        self.bytes.append(size if type(size) is int else MISSING)
        copy = src = dst = -1
        if kind == _MEMCPY:  # "Memcpy HtoD (Pageable -> Device)"
            match = _COPY_NAME.match(name)
            copy = COPY_KINDS.index(copy_kind_of(match.group(1) if match else None))
            if match:
                src = MEM_KINDS.index(mem_kind_of(match.group(2)))
                dst = MEM_KINDS.index(mem_kind_of(match.group(3)))
        elif kind == _MEMSET:  # "Memset (Device)"
            match = _SET_NAME.match(name)
            dst = MEM_KINDS.index(mem_kind_of(match.group(1))) if match else -1
        self.copy.append(copy)
        self.src.append(src)
        self.dst.append(dst)

    def _id(self, value: object) -> int:
        """Kineto uses strings for some pids/tids ("Spans", "stream 7 7"): give each a negative id."""
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        return self.ids.setdefault(value, -1 - len(self.ids))

    def frame(self) -> pd.DataFrame:
        n = len(self.kind)
        if not n:
            return finish(pd.DataFrame())
        ts = np.frombuffer(self.ts, dtype=np.float64)
        dur = np.frombuffer(self.dur, dtype=np.float64)
        start = np.rint(ts * 1000.0).astype(np.int64)
        end = start + np.maximum(np.rint(dur * 1000.0).astype(np.int64), 0)
        names = _by_code(self.names)
        callers = np.full(n, -1, dtype=np.int32)
        callers[np.frombuffer(self.call_row, dtype=np.int64)] = np.frombuffer(self.call_code, dtype=np.int32)
        rows = np.frombuffer(self.row, dtype=np.int64)

        def spread(values, dtype, fill):
            full = np.full(n, fill, dtype=dtype)
            full[rows] = np.frombuffer(values, dtype=dtype)
            return full

        return finish(pd.DataFrame({
            "kind": categorical(np.frombuffer(self.kind, dtype=np.int8), KINDS, DTYPES["kind"]),
            "name": categorical(np.frombuffer(self.name, dtype=np.int32), names),
            "start_ns": start,
            "end_ns": end,
            "pid": np.frombuffer(self.pid, dtype=np.int64),
            "tid": np.frombuffer(self.tid, dtype=np.int64),
            "device": nullable(spread(self.device, np.int64, MISSING)),
            "stream": nullable(spread(self.stream, np.int64, MISSING)),
            "correlation": nullable(spread(self.correlation, np.int64, MISSING)),
            "bytes": nullable(spread(self.bytes, np.int64, MISSING)),
            "copy_kind": categorical(spread(self.copy, np.int8, -1), COPY_KINDS, DTYPES["copy_kind"]),
            "src_kind": categorical(spread(self.src, np.int8, -1), MEM_KINDS, DTYPES["src_kind"]),
            "dst_kind": categorical(spread(self.dst, np.int8, -1), MEM_KINDS, DTYPES["dst_kind"]),
            "call_from": categorical(callers, _by_code(self.call_names)),
        }))


def _by_code(codes: dict[str, int]) -> list[str]:
    names = [""] * len(codes)
    for name, code in codes.items():
        names[code] = name
    return names


class _Reader:
    """A text stream read in chunks, with JSON values decoded at a cursor."""

    def __init__(self, stream: IO[str], label: str):
        self.stream, self.label = stream, label
        self.buf, self.pos, self.eof, self.consumed = "", 0, False, 0

    def fill(self) -> bool:
        if self.eof:
            return False
        data = self.stream.read(CHUNK_CHARS)
        if not data:
            self.eof = True
            return False
        self.consumed += self.pos
        self.buf = self.buf[self.pos:] + data
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the file)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise self.broken(f"expected '{char}'" + (f", found '{found}'" if found else ", found the end of the file"))
        self.pos += 1

    def value(self):
        """Decode one JSON value at the cursor, reading more of the file while it is cut off."""
        self.peek()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof:  # a number at the end of the buffer may go on
                    self.pos = end
                    return obj
            except json.JSONDecodeError:
                if self.eof:
                    raise self.broken("the JSON is cut off or corrupt") from None
            self.fill()  # cut off by the buffer's end: read on (at the end of the file, decide next round)

    def events(self, columns: _Columns) -> None:
        """Decode the traceEvents array (cursor after '[') a batch at a time into columns."""
        if self.peek() == "]":
            self.pos += 1
            return
        singles = 0  # events left to decode one at a time after a window without a clean cut
        while True:
            if len(self.buf) - self.pos < CHUNK_CHARS // 2 and not self.eof:
                self.fill()
            batch, end = (None, 0) if singles else self._batch()
            if batch is None:
                singles = singles - 1 if singles else 1000
                batch = [self.value()]
            else:
                self.pos = end
            try:
                columns.add_batch(batch)
            except (TypeError, ValueError, AttributeError) as exc:  # an event of the wrong shape
                raise self.broken(f"an event with a field of the wrong type: {exc}") from None
            sep = self.peek()
            if sep == "]":
                self.pos += 1
                return
            if sep != ",":
                raise self.broken("the traceEvents list is cut off or corrupt")
            self.pos += 1

    def _batch(self):
        """Decode as many whole events as the buffer holds, cut at the last '}' before a ','."""
        start = self.pos
        cut = self.buf.rfind("},", start, len(self.buf))
        while cut > start:
            try:
                return json.loads("[" + self.buf[start:cut + 1] + "]"), cut + 1
            except json.JSONDecodeError as err:  # the cut fell inside a string or an object, or bad data:
                # the events before the error position are whole, so cut before it
                cut = self.buf.rfind("},", start, min(cut, start + max(err.pos - 1, 0)))
                if cut - start < 4096:
                    return None, start
        return None, start

    def broken(self, what: str) -> TraceError:
        return TraceError(f"{self.label}: not a readable Kineto trace ({what} near character "
                          f"{self.consumed + self.pos:,}); re-export it with prof.export_chrome_trace()")


def read_kineto(stream: IO[str], label: str) -> tuple[pd.DataFrame, dict]:
    """Parse a Kineto JSON document from a text stream: (events, top-level metadata)."""
    reader = _Reader(stream, label)
    if reader.peek() != "{":
        raise TraceError(f"{label}: not a Kineto trace (a JSON object with a traceEvents list was expected)")
    reader.pos += 1
    meta: dict = {}
    columns = _Columns()
    found = False
    if reader.peek() == "}":
        reader.pos += 1
    else:
        while True:
            key = reader.value()
            if not isinstance(key, str):
                raise reader.broken("expected a key")
            reader.expect(":")
            if key == "traceEvents":
                reader.expect("[")
                reader.events(columns)
                found = True
            else:
                meta[key] = reader.value()
            sep = reader.peek()
            reader.pos += 1
            if sep == "}":
                break
            if sep != ",":
                raise reader.broken("the top-level object is cut off or corrupt")
    if not found:
        raise TraceError(f"{label}: JSON without a traceEvents list, so not a Kineto trace; "
                         "export one with torch.profiler's prof.export_chrome_trace(path)")
    events = columns.frame()
    _host_pid_for_gpu_rows(events)
    return events, meta


def _host_pid_for_gpu_rows(events: pd.DataFrame) -> None:
    """Kineto files GPU rows under the device number; give them the (single) host process instead."""
    host = events.loc[events["kind"] == "cuda_api", "pid"].unique()
    if len(host) == 1:
        gpu = events["device"].notna().to_numpy()
        events.loc[gpu, "pid"] = int(host[0])
