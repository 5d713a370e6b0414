"""The normalized event table that both loaders produce: its columns, their dtypes, and helpers.

One row per timed event. Times are integer nanoseconds on the trace's own clock (Kineto: microseconds
since its base time, times 1000; nsys: nanoseconds since the session start). GPU rows (kernel, memcpy,
memset, sync, and GPU-side ranges) have ``device`` and ``stream`` set and carry the stream in ``tid``;
host rows have them missing.

======================  ===========  ================================================================
column                  dtype        meaning
======================  ===========  ================================================================
kind                    category     cpu_op, cuda_api, kernel, memcpy, memset, sync, range, python
name                    category     op, API (version suffix stripped), kernel, range or frame name
start_ns, end_ns        int64        start and end
pid, tid                int64        host process and thread (GPU rows: launching process, stream)
device, stream          Int64        GPU rows only
correlation             Int64        links a cuda_api call to the GPU work it launched
bytes                   Int64        memcpy / memset size
copy_kind               category     HtoD, DtoH, DtoD, HtoH, PtoP, ... (memcpy rows)
src_kind, dst_kind      category     pageable, pinned, device, managed, ... (memcpy / memset rows)
step                    Int64        the step whose range encloses the event (GPU rows: their launch's)
call_from               category     python rows: the caller's ``path:line`` (torch.profiler >= 2.12
                                     records it as ``CallFrom``); missing elsewhere and in nsys
======================  ===========  ================================================================
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

KINDS = ("cpu_op", "cuda_api", "kernel", "memcpy", "memset", "sync", "range", "python")
GPU_KINDS = ("kernel", "memcpy", "memset", "sync")
COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "unknown")
MEM_KINDS = ("pageable", "pinned", "device", "array", "managed", "device_static", "managed_static", "unknown")

COLUMNS = ("kind", "name", "start_ns", "end_ns", "pid", "tid", "device", "stream", "correlation",
           "bytes", "copy_kind", "src_kind", "dst_kind", "step", "call_from")
DTYPES = {
    "kind": pd.CategoricalDtype(KINDS),
    "name": "category",
    "start_ns": "int64",
    "end_ns": "int64",
    "pid": "int64",
    "tid": "int64",
    "device": "Int64",
    "stream": "Int64",
    "correlation": "Int64",
    "bytes": "Int64",
    "copy_kind": pd.CategoricalDtype(COPY_KINDS),
    "src_kind": pd.CategoricalDtype(MEM_KINDS),
    "dst_kind": pd.CategoricalDtype(MEM_KINDS),
    "step": "Int64",
    "call_from": "category",
}
MISSING = np.iinfo(np.int64).min  # sentinel for "no value" in the int64 arrays loaders fill


def empty_events() -> pd.DataFrame:
    """An event table with no rows and every column's dtype."""
    return pd.DataFrame({c: pd.Series(dtype=DTYPES[c]) for c in COLUMNS})


def nullable(values) -> pd.arrays.IntegerArray:
    """An int64 array using MISSING for gaps -> a nullable Int64 array."""
    values = np.asarray(values, dtype=np.int64)
    return pd.arrays.IntegerArray(values, values == MISSING)


def categorical(codes, categories, dtype: pd.CategoricalDtype | None = None) -> pd.Categorical:
    """Integer codes (-1 = missing) into a Categorical; with dtype, the categories are that dtype's."""
    codes = np.asarray(codes, dtype=np.int32)
    if dtype is None:
        # two codes may name the same text (two StringIds rows, or two API versions once their suffix is gone):
        # one category each, the codes mapped onto it
        unique, first = np.unique(np.array(list(categories), dtype=object), return_inverse=True)
        if len(unique) < len(first):
            codes = np.where(codes >= 0, first[np.clip(codes, 0, None)] if len(first) else codes, -1).astype(np.int32)
            categories = unique
        return pd.Categorical.from_codes(codes, categories=pd.Index(list(categories), dtype=object))
    return pd.Categorical.from_codes(codes, dtype=dtype)


def finish(frame: pd.DataFrame) -> pd.DataFrame:
    """Give a loader's frame the table's columns and dtypes, sorted by start (enclosing events first)."""
    if frame.empty:
        return empty_events()
    for column in COLUMNS:
        if column not in frame:
            frame[column] = pd.Series(pd.NA if DTYPES[column] != "int64" else 0, index=frame.index)
    frame = frame[list(COLUMNS)].astype(DTYPES)
    order = np.lexsort((-frame["end_ns"].to_numpy(), frame["start_ns"].to_numpy()))
    return frame.iloc[order].reset_index(drop=True)


_COPY_KIND_WORDS = {c.upper(): c for c in COPY_KINDS}


def copy_kind_of(text: str | None) -> str:
    """'HtoD', 'CUDA_MEMCPY_KIND_HTOD', 'CUDA_MEMCPY_KIND_UVM_HTOD', 'Host-to-Device' -> 'HtoD'."""
    if not text:
        return "unknown"
    word = text.rsplit("KIND_", 1)[-1].replace("UVM_", "").upper()
    if word in _COPY_KIND_WORDS:
        return _COPY_KIND_WORDS[word]
    label = re.sub(r"^unified\s+", "", text.strip().lower())
    parts = re.match(r"(host|device|array|peer)-to-(host|device|array|peer)$", label)
    if parts:
        short = {"host": "H", "device": "D", "array": "A", "peer": "P"}
        word = f"{short[parts.group(1)]}TO{short[parts.group(2)]}"
        return _COPY_KIND_WORDS.get(word, "unknown")
    return "unknown"


def mem_kind_of(text: str | None) -> str:
    """'Pageable', 'CUDA_MEMOPR_MEMORY_KIND_PINNED', 'Device Static' -> 'pageable', 'pinned', 'device_static'."""
    if not text:
        return "unknown"
    word = text.rsplit("MEMORY_KIND_", 1)[-1].strip().lower().replace(" ", "_")
    return word if word in MEM_KINDS else "unknown"
