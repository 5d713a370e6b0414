"""Where an event came from: the aten op that made the call, and the user's line of Python.

torch.profiler records Python frames (``with_stack=True``) as ``python_function`` events named
``path(line): function``, with ``path`` as Python knew the file (often relative to the folder on
``sys.path`` that holds it: ``torch/nn/modules/module.py``, ``train.py``). The user's line of an event is
the innermost enclosing frame on the same thread whose file is the user's: not the standard library,
not an installed package (``site-packages``, or a known library such as ``torch``), and not this
workbook's own ``checker`` package. nsys traces carry no Python frames, so there it is None.
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
}) | frozenset(getattr(sys, "stdlib_module_names", ()))


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
        which = np.flatnonzero(row_tids == tid)
        points = starts_all[rows[which]]
        found = innermost(points, starts_all[pool], ends_all[pool])
        if exclude_self:  # a row that is itself in the pool: take its parent instead
            for k, (w, f) in enumerate(zip(which, found)):
                while f >= 0 and pool[f] == rows[w]:
                    f = _parent(f, points[k], starts_all[pool], ends_all[pool], rows[w], pool)
                found[k] = f
        for w, f in zip(which, found):
            if f >= 0:
                out[w] = label[pool[f]]
    return out


def _parent(f: int, point: int, starts: np.ndarray, ends: np.ndarray, row: int, pool: np.ndarray) -> int:
    j = f - 1
    while j >= 0:
        if ends[j] > point and starts[j] <= point and pool[j] != row:
            return j
        j -= 1
    return -1


def where_of(events: pd.DataFrame, rows: np.ndarray) -> list:
    """For each event row, the user's 'path:line' that was running when it started, or None.

    The innermost user frame holding the event names the function; the line is where that function
    made the call that led to the event: the ``CallFrom`` of the frame it called (torch.profiler >=
    2.12). Without CallFrom, the user frame's own line is used, which torch.profiler records as the
    function's first line (or, for a frame already running when profiling began, the line it was on).
    """
    rows = np.asarray(rows, dtype=np.int64)
    out: list = [None] * len(rows)
    python = (events["kind"] == "python").to_numpy()
    if not python.any() or not len(rows):
        return out
    names = events["name"]
    user = {name: user_where(str(name)) for name in names[python].unique()}
    label = np.array(names.map(user).astype(object), dtype=object)
    user_mask = python & pd.notna(label)
    holders = _holder(events, user_mask, rows, np.arange(len(events)))  # row of the innermost user frame
    callers = events["call_from"].astype(object).to_numpy()
    tids, starts, ends = (events[c].to_numpy() for c in ("tid", "start_ns", "end_ns"))
    frames_by_tid = pd.Series(np.flatnonzero(python)).groupby(tids[python]).indices
    python_rows = np.flatnonzero(python)
    for i, (row, holder) in enumerate(zip(rows, holders)):
        if holder is None:
            continue
        out[i] = label[holder]
        pool = python_rows[frames_by_tid[tids[holder]]]
        lo = np.searchsorted(pool, holder, side="right")           # frames after the holder, in start order
        hi = np.searchsorted(starts[pool], starts[row], side="right")
        inside = np.flatnonzero(ends[pool[lo:hi]] > starts[row])
        if inside.size:  # the frame the user's function called, on the way to this event
            line = _caller_line(callers[pool[lo + inside[0]]])
            if line:
                out[i] = line
    return out


def op_of(events: pd.DataFrame, rows: np.ndarray) -> list:
    """For each event row, the innermost aten/cpu op around it on its thread (not itself), or None."""
    rows = np.asarray(rows, dtype=np.int64)
    ops = (events["kind"] == "cpu_op").to_numpy()
    label = events["name"].astype(object).to_numpy()
    return _holder(events, ops, rows, label, exclude_self=True)
