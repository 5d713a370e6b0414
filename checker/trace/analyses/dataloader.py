"""Data-loader wait: how long each step waited for its batch.

The workbook's harness fetches each batch inside a range named ``data`` nested in the step's range
(NVTX and record_function alike). Where a trace has no ``data`` ranges, torch.profiler's own ranges
around a DataLoader's ``__next__`` (``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``)
are used instead. Overlapping ranges of one step count once.

Samples prepared in the traced process are found by what they call, not by the names of the code that calls it
(``sample_preparations``): a chapter names its preparation's primitives (the JPEG decoder's C call, an augmentation's
aten op), and each such call grows to the frame that prepared that one sample, however the script named it.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd

from checker.trace.analyses.gpu_idle import GPU_WORK, in_a_sync
from checker.trace.analyses.syncs import DATA_RANGE, frame_origin
from checker.trace.intervals import merge

LOADER_NEXT = re.compile(r"DataLoader.*__next__")
WAIT_COLUMNS = {"step": "int64", "step_ns": "int64", "data_wait_ns": "int64", "data_wait_fraction": float,
                "source": object}


def wait_ranges(events: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The host ranges in steps that wait for a batch, and which kind they are: the harness's ``data`` ranges,
    else torch.profiler's DataLoader ``__next__`` ranges ("none" when there are neither)."""
    host = events[events["device"].isna() & events["step"].notna()]
    ranges = host[(host["kind"] == "range") & (host["name"] == DATA_RANGE)]
    if len(ranges):
        return ranges, "data range"
    candidates = host[host["kind"].isin(("range", "cpu_op"))]
    names = [n for n in candidates["name"].unique() if LOADER_NEXT.search(str(n))]
    ranges = candidates[candidates["name"].isin(names)]
    return ranges, "DataLoader __next__" if len(ranges) else "none"


def call_name(name: str) -> str:
    """A Python call as the same code records it anywhere: its function's name without the file and line a frame's
    name starts with (a copy of the code elsewhere), and a built-in's without the address of its object."""
    name = re.sub(r" at 0x[0-9a-fA-F]+", "", str(name))
    return name.rsplit("): ", 1)[-1] if "): " in name else name


def _in_fetches(events: pd.DataFrame, inner: pd.DataFrame, names: np.ndarray, keys: list[str]) -> dict[int, Counter]:
    """Per step, the names of the ``inner`` events (``names``, one per row) that lie inside the step's fetch ranges
    (wait_ranges) and share the range's ``keys`` columns (its process, or its process and thread)."""
    ranges, _kind = wait_ranges(events)
    starts, ends = inner["start_ns"].to_numpy(np.int64), inner["end_ns"].to_numpy(np.int64)
    out: dict[int, Counter] = {}
    for key, mine in ranges.groupby(keys):
        same = np.ones(len(inner), dtype=bool)
        for column, value in zip(keys, key if isinstance(key, tuple) else (key,)):
            same &= (inner[column] == value).to_numpy()
        for step, lo, hi in zip(mine["step"], mine["start_ns"], mine["end_ns"]):
            out.setdefault(int(step), Counter()).update(names[same & (starts >= lo) & (ends <= hi)].tolist())
    return out


def fetch_calls(events: pd.DataFrame) -> dict[int, Counter]:
    """Per step, the Python calls (frames and C calls, as Python's tracer records them, by ``call_name``) that run
    inside the step's fetch of its batch: the loader's own machinery, and with no workers, the dataset's work for
    every sample. Steps without a fetch range are left out; a trace without Python events gives an empty count."""
    python = events[events["kind"] == "python"]
    return _in_fetches(events, python, python["name"].astype(str).map(call_name).to_numpy(), ["pid"])


def fetch_ops(events: pd.DataFrame) -> dict[int, Counter]:
    """Per step, the aten ops that run inside the step's fetch of its batch on the fetching thread (the harness's
    ``data`` range, else the DataLoader's ``__next__``): with workers, tensors rebuilt from shared memory and the
    sampler's draws; whatever else runs there computes in the training process (a batch finished as it is unpickled).
    Steps without a fetch range are left out."""
    ops = events[events["kind"] == "cpu_op"]
    return _in_fetches(events, ops, ops["name"].astype(str).to_numpy(), ["pid", "tid"])


def script_frames_in_fetches(events: pd.DataFrame) -> Counter:
    """The Python frames of the script's own code (not torch's, the standard library's, an installed package's or the
    grader's) that run inside the traced steps' fetches in the training process, by name. With workers an honest fetch
    runs none: the DataLoader's machinery rebuilds tensors and the workload's sampler draws. Code a worker's result
    runs as it is unpickled does (red team 37's unpickle_pyprep_07 cropped and flipped every sample in pure Python
    there, building the batch with the two ops an honest rebuild records)."""
    python = events[events["kind"] == "python"]
    names = python["name"].astype(str).to_numpy()
    found: Counter = Counter()
    for counter in _in_fetches(events, python, names, ["pid"]).values():
        found.update({name: n for name, n in counter.items() if frame_origin(name) == "user"})
    return found


def data_wait(events: pd.DataFrame, steps: pd.DataFrame, exclude_steps=(), loading: str | None = None,
              preparing: str | None = None) -> pd.DataFrame:
    """One row per step: step_ns, data_wait_ns, data_wait_fraction, source (which ranges were used).

    ``loading``: a pattern of Python frames that make samples (a dataset's ``__getitem__``). Such a frame in a
    step of the traced process is loading there, wherever in the step it runs: its time counts as waiting too
    (once, where it falls in a wait range), so that samples made after the batch arrived are not left out.
    ``preparing``: a pattern of the calls that prepare a sample (``sample_preparations``): the frames that made
    them count the same way, whatever they are named."""
    excluded = {int(x) for x in exclude_steps}
    steps = steps[~steps["step"].isin(excluded)]
    ranges, source = wait_ranges(events)
    if loading:
        frames = events[(events["kind"] == "python") & events["step"].notna()
                        & events["name"].astype(str).str.contains(loading)]
        if len(frames):
            ranges = pd.concat([ranges[["step", "start_ns", "end_ns"]], frames[["step", "start_ns", "end_ns"]]])
    if preparing:
        made = sample_preparations(events, steps, preparing)
        if len(made):
            ranges = pd.concat([ranges[["step", "start_ns", "end_ns"]], made[["step", "start_ns", "end_ns"]]])
    waits = {}
    for step, group in ranges.groupby("step"):
        s, e = merge(group["start_ns"].to_numpy(), group["end_ns"].to_numpy())
        waits[int(step)] = int((e - s).sum())
    wait = np.array([waits.get(int(s), 0) for s in steps["step"]], dtype=np.int64)
    dur = steps["dur_ns"].to_numpy(dtype=np.int64)
    return pd.DataFrame({
        "step": steps["step"].to_numpy(dtype=np.int64),
        "step_ns": dur,
        "data_wait_ns": wait,
        "data_wait_fraction": np.where(dur > 0, wait / np.maximum(dur, 1), np.nan),
        "source": source,
    }).astype(WAIT_COLUMNS)


# What only the training itself runs: a frame that encloses any of it is a step, not one sample's preparation
TRAINING_WORK = re.compile(r"^(?:autograd::|Optimizer\.|aten::convolution$|aten::linear$|aten::addmm$|aten::mm$)"
                           r"|run_backward of")
PREP_COLUMNS = {"step": "int64", "tid": "int64", "call": object, "start_ns": "int64", "end_ns": "int64",
                "frame": object}


def sample_preparations(events: pd.DataFrame, steps: pd.DataFrame, calls: str) -> pd.DataFrame:
    """One row per sample-preparation call in the traced steps: step, tid, call (its name), and the frame that made
    that sample (start_ns, end_ns, frame: its name, clipped to the step).

    ``calls`` names what preparing a sample cannot do without: the decoder's C call (``<built-in method decode of
    ImagingDecoder ...>``), an augmentation's aten op (``aten::flip``). A script may rename, copy or inline the
    dataset's code, but not these. Each call grows outward through the Python frames of its thread: to the frame that
    called it (one sample's decoder may be called several times there, on chunks), then on while a frame holds no
    more calls of that name than the one below it (a frame that also holds another sample's is a batch's) and none
    of the training's own work (``TRAINING_WORK``): the frame left is that sample's maker, whatever its name, and its
    time is the sample's."""
    in_steps = events[events["step"].notna() & events["kind"].isin(("python", "cpu_op"))]
    pattern = re.compile(calls)
    named = in_steps["name"].astype(str)
    prim = in_steps[named.map(lambda n: bool(pattern.search(n)))]
    if prim.empty or steps.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in PREP_COLUMNS.items()})
    bounds = {int(s): (int(a), int(b)) for s, a, b in steps[["step", "start_ns", "end_ns"]].itertuples(index=False)}
    prim = prim[prim["step"].astype("int64").isin(list(bounds))]
    rows = []
    for tid, mine in prim.groupby("tid"):
        thread = events[(events["tid"] == tid) & (events["pid"] == mine["pid"].iloc[0])]
        frames = thread[thread["kind"] == "python"]
        f_start, f_end = frames["start_ns"].to_numpy(np.int64), frames["end_ns"].to_numpy(np.int64)
        f_name = frames["name"].astype(str).to_numpy()
        work = thread[thread["name"].astype(str).str.contains(TRAINING_WORK)]
        work_at = np.sort(work["start_ns"].to_numpy(np.int64))
        starts_by_call = {name: np.sort(group["start_ns"].to_numpy(np.int64))
                          for name, group in mine.groupby(mine["name"].astype(str))}
        for step, name, p0, p1 in mine[["step", "name", "start_ns", "end_ns"]].itertuples(index=False):
            step, name, p0, p1 = int(step), str(name), int(p0), int(p1)
            same = starts_by_call[name]
            around = np.flatnonzero((f_start <= p0) & (f_end >= p1) & ((f_start != p0) | (f_end != p1)))
            around = around[np.argsort(f_end[around] - f_start[around], kind="stable")]  # innermost first
            start, end, frame, held = p0, p1, name, None
            for k in around:
                a, b = int(f_start[k]), int(f_end[k])
                calls_in = int(np.searchsorted(same, b, side="right") - np.searchsorted(same, a, side="left"))
                training = np.searchsorted(work_at, b, side="right") > np.searchsorted(work_at, a, side="left")
                if training or (held is not None and calls_in > held):
                    break
                start, end, frame, held = a, b, str(f_name[k]), calls_in
            s0, s1 = bounds[step]
            rows.append((step, int(tid), name, max(start, s0), min(end, s1), frame))
    return pd.DataFrame(rows, columns=list(PREP_COLUMNS)).astype(PREP_COLUMNS)


IDLE_COLUMNS = {"step": "int64", "data_wait_ns": "int64", "gpu_idle_ns": "int64", "after_sync_ns": "int64"}


def empty_idle() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in IDLE_COLUMNS.items()})


def data_wait_gpu_idle(events: pd.DataFrame, steps: pd.DataFrame, syncs: pd.DataFrame,
                       exclude_steps=()) -> pd.DataFrame:
    """One row per step: data_wait_ns (over the ranges ``data_wait`` reads); gpu_idle_ns, how much of that wait
    the GPU had nothing to run; and
    after_sync_ns, how much of that idle time began while the host sat in a host sync (the sync emptied the
    GPU's queue, then the host went to prepare the next batch with nothing queued behind it).

    A batch prepared while the GPU still runs the previous step's kernels costs no GPU time; one prepared
    after a sync has drained the queue costs all of it. Empty for a trace without GPU work.
    """
    gpu = events[events["kind"].isin(GPU_WORK)]
    if gpu.empty or steps.empty:
        return empty_idle()
    busy_s, busy_e = merge(gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy())
    sync_s = syncs["start_ns"].to_numpy(dtype=np.int64) if len(syncs) else np.empty(0, np.int64)
    sync_e = sync_s + (syncs["dur_ns"].to_numpy(dtype=np.int64) if len(syncs) else 0)
    excluded = {int(x) for x in exclude_steps}
    by_step = {int(k): g for k, g in wait_ranges(events)[0].groupby("step")}
    out = []
    for step in steps["step"]:
        step = int(step)
        if step in excluded:
            continue
        wait = idle = after_sync = 0
        group = by_step.get(step)
        if group is not None:
            for d0, d1 in zip(*merge(group["start_ns"].to_numpy(), group["end_ns"].to_numpy())):
                d0, d1 = int(d0), int(d1)
                wait += d1 - d0
                # the GPU's idle gaps inside [d0, d1]: between the busy intervals that overlap it
                a = int(np.searchsorted(busy_e, d0, side="right"))
                b = int(np.searchsorted(busy_s, d1, side="left"))
                cursor = d0
                gap_opened = int(busy_e[a - 1]) if a > 0 else None  # when the GPU went idle before d0
                for k in range(a, b + 1):
                    gap_end = min(int(busy_s[k]), d1) if k < b else d1
                    if gap_end > cursor:
                        idle += gap_end - cursor
                        if gap_opened is not None and in_a_sync(gap_opened, sync_s, sync_e):
                            after_sync += gap_end - cursor
                    if k < b:
                        cursor = max(cursor, int(busy_e[k]))
                        gap_opened = int(busy_e[k])
        out.append((step, wait, idle, after_sync))
    return pd.DataFrame(out, columns=list(IDLE_COLUMNS)).astype(IDLE_COLUMNS)

