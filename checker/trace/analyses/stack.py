"""Where an event came from: the aten op that made the call, and the user's line of Python.

torch.profiler records Python frames (``with_stack=True``) as ``python_function`` events named
``path(line): function``, with ``path`` as Python knew the file (often relative to the folder on
``sys.path`` that holds it: ``torch/nn/modules/module.py``, ``train.py``). The user's frame of an event
is the innermost enclosing frame on the same thread whose file is the user's: not the standard library,
not an installed package (``site-packages``, or a known library such as ``torch``), and not this
workbook's own ``checker`` package; the line is taken from the call it made (see where_of). nsys
traces carry no Python frames, so there it is None.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd

from checker.trace.intervals import innermost

FRAME = re.compile(r"^(?P<path>[^<(][^(]*)\((?P<line>\d+)\): (?P<func>.*)$")
LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "functorch", "triton", "numpy", "nvtx",
    "checker", "tqdm", "PIL", "pandas", "transformers", "accelerate", "lightning", "pytorch_lightning", "timm",
    "apex", "pytest", "_pytest", "pluggy", "runpy", "typing_extensions", "einops", "safetensors", "datasets",
}) | (frozenset(getattr(sys, "stdlib_module_names", ())) - {"test", "code", "trace", "profile"})  # common script names


def is_user_path(path: str) -> bool:
    """True for a file of the user's: not the standard library, an installed package, or ``checker``."""
    parts = path.replace("\\", "/").split("/")
    if any(p in ("site-packages", "dist-packages") for p in parts) or "/lib/python3" in path:
        return False
    top = next((p for p in parts if p and p != "."), "")
    return not (top.removesuffix(".py") in LIBRARIES or "checker" in parts[:-1] or path.startswith("<"))


def user_where(frame_name: str) -> str | None:
    """'train.py(41): <module>' -> 'train.py:41'; None for a library or standard-library frame."""
    match = FRAME.match(frame_name)
    if not match or not is_user_path(match.group("path")):
        return None
    return f"{match.group('path')}:{match.group('line')}"


def _caller_line(call_from) -> str | None:
    """A CallFrom value ('train.py:97') when it points into the user's code."""
    if not isinstance(call_from, str) or ":" not in call_from:
        return None
    path, _, line = call_from.rpartition(":")
    return call_from if line.isdigit() and is_user_path(path) else None


def _holder(events: pd.DataFrame, kind_mask: np.ndarray, rows: np.ndarray, label: np.ndarray,
            exclude_self: bool = False) -> list:
    """For each row, the label of the innermost event of kind_mask holding its start on its thread."""
    out: list = [None] * len(rows)
    if not len(rows) or not kind_mask.any():
        return out
    tids = events["tid"].to_numpy()
    starts_all, ends_all = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    candidates = np.flatnonzero(kind_mask)
    by_tid = pd.Series(candidates).groupby(tids[candidates]).indices
    row_tids = tids[rows]
    for tid in np.unique(row_tids):
        if tid not in by_tid:
            continue
        pool = candidates[by_tid[tid]]  # already sorted by (start, -end): the table's order
        pool_starts, pool_ends = starts_all[pool], ends_all[pool]
        which = np.flatnonzero(row_tids == tid)
        points = starts_all[rows[which]]
        found = innermost(points, pool_starts, pool_ends)
        if exclude_self:  # a row that is itself in the pool: take the innermost one holding it instead
            for k, (w, f) in enumerate(zip(which, found)):
                if f >= 0 and pool[f] == rows[w]:
                    found[k] = innermost(points[k:k + 1], pool_starts[:f], pool_ends[:f])[0]
        for w, f in zip(which, found):
            if f >= 0:
                out[w] = label[pool[f]]
    return out


def where_of(events: pd.DataFrame, rows: np.ndarray) -> list:
    """For each event row, the user's 'path:line' that was running when it started, or None.

    The innermost user frame holding the event names the function; the line is where that function
    made the call that led to the event: the ``CallFrom`` (torch.profiler >= 2.12) of the innermost frame
    called from user code, when that frame is inside the user frame. A sync reached through an operator
    (``if t:``, ``float(t)``, ``x[mask]``) has no call around it; Python runs a line's calls before the
    operator that consumes them, so the line of the last call the user frame made before the event is
    used: exact for ``if torch.isnan(x).any():`` or ``float(x.sum())``, the line before for a line that
    makes no call of its own (``hard = x[mask]`` right after ``mask = ...``). Without any ``CallFrom``
    (torch < 2.12), the user frame's own line is used: the function's first line, or, for a frame already
    running when profiling began, the line it was on.
    """
    rows = np.asarray(rows, dtype=np.int64)
    out: list = [None] * len(rows)
    python = (events["kind"] == "python").to_numpy()
    if not python.any() or not len(rows):
        return out
    names = events["name"]
    user = {name: user_where(str(name)) for name in names[python].unique()}
    label = np.array(names.map(user).astype(object), dtype=object)
    holders = _holder(events, python & pd.notna(label), rows, np.arange(len(events)))
    callers = events["call_from"]
    called_from_user = {c: _caller_line(str(c)) for c in callers.cat.categories}
    caller_line = np.array(callers.map(called_from_user).astype(object), dtype=object)
    callees = _holder(events, python & pd.notna(caller_line), rows, np.arange(len(events)))
    has_caller = np.flatnonzero(python & pd.notna(caller_line))
    tids, starts, ends = (events[c].to_numpy() for c in ("tid", "start_ns", "end_ns"))
    for i, (holder, callee) in enumerate(zip(holders, callees)):
        if holder is None:
            continue
        if callee is not None and callee > holder:  # rows are in start order, holders first
            out[i] = caller_line[callee]
            continue
        # No call holds the event: an operator reached it (`if t:`, float(t), x[mask]). Python runs a line's
        # calls before the operator that consumes their result, so the last call the user frame made
        # before the event names the line; without one, the frame's own line is all the trace has.
        row = rows[i]
        pool = has_caller[(tids[has_caller] == tids[row]) & (starts[has_caller] >= starts[holder])
                          & (ends[has_caller] <= starts[row])]
        out[i] = caller_line[pool[np.argmax(ends[pool])]] if len(pool) else label[holder]
    return out


def frame_rows_of(events: pd.DataFrame, rows: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """For each event row, the row of the innermost Python frame among ``frames`` (a mask of python rows) holding it
    on its thread, or -1."""
    rows = np.asarray(rows, dtype=np.int64)
    found = _holder(events, frames, rows, np.arange(len(events)))
    return np.array([-1 if f is None else f for f in found], dtype=np.int64)


def op_of(events: pd.DataFrame, rows: np.ndarray) -> list:
    """For each event row, the innermost aten/cpu op around it on its thread (not itself), or None."""
    rows = np.asarray(rows, dtype=np.int64)
    ops = (events["kind"] == "cpu_op").to_numpy()
    label = events["name"].astype(object).to_numpy()
    return _holder(events, ops, rows, label, exclude_self=True)


def call_of(events: pd.DataFrame, rows: np.ndarray) -> list:
    """For each event row, the innermost Python call around it on its thread (the profiler's Python tracer), or None."""
    rows = np.asarray(rows, dtype=np.int64)
    python = (events["kind"] == "python").to_numpy()
    return _holder(events, python, rows, events["name"].astype(object).to_numpy())

