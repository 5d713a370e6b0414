"""Training steps: find the step ranges, and give every event the step it belongs to.

A step is a host-side range whose name matches the step pattern (by default ``ProfilerStep#N``,
``step N``, ``batch N`` or ``iteration N``; the first group of the pattern is the step number). The
ranges come from torch.profiler's ``record_function`` / ``profiler.step()`` on the host thread (its
GPU-side copies, ``gpu_user_annotation``, are not counted again) and from NVTX push/pop and start/end
ranges in nsys. When matching ranges nest (an NVTX ``step 3`` around a record_function ``step 3``, or
``ProfilerStep#3`` around ``step 3``), the innermost one is the step.

Each host event gets the step whose range holds its start on the same thread; events of a thread
without step ranges (the autograd engine's backward thread, a pin-memory thread) get the step of the
process's stepping thread at that time. GPU work gets the step of the CUDA API call that launched it,
through the correlation id, wherever it ran on the GPU's own timeline.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from checker.trace.errors import TraceError
from checker.trace.intervals import in_disjoint

DEFAULT_STEP_REGEX = r"^(?:ProfilerStep#|step |batch |iteration )(\d+)$"

STEP_COLUMNS = {"step": "int64", "name": object, "start_ns": "int64", "end_ns": "int64", "dur_ns": "int64",
                "pid": "int64", "tid": "int64"}


def compile_step_regex(pattern: str | None) -> re.Pattern:
    try:
        return re.compile(pattern or DEFAULT_STEP_REGEX)
    except re.error as exc:
        raise TraceError(f"step pattern {pattern!r} is not a valid regular expression ({exc})") from None


def empty_steps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in STEP_COLUMNS.items()})


def find_steps(events: pd.DataFrame, pattern: re.Pattern, warnings: list[str] | None = None) -> pd.DataFrame:
    """The step ranges, one row each, sorted by start: step, name, start_ns, end_ns, dur_ns, pid, tid.

    Damaged step ranges are mended where the trace leaves one reading, and each mend is added to
    ``warnings`` (a list the caller passes):

    - two ranges on one thread that overlap without one holding the other: the earlier one is cut where
      the later one begins (nesting is told from overlap by the ends: a held range ends inside its holder);
    - a range without a duration (0, or missing in the file): it is taken to end where the next step on
      its thread begins, or, for the last one, where the last event on its thread that starts inside it ends;
    - the same step number on several ranges of one thread (seven ranges all named ``step 1``): the steps
      are numbered 0, 1, ... in time order instead;
    - a step number too long for 64 bits, or a pattern without a number group: numbered in time order too
      (the latter by design, with a warning naming the kinds of range the pattern matched).
    Ranges with one number on different threads or processes are one step: the first one's.
    """
    warnings = warnings if warnings is not None else []
    ranges = events[(events["kind"] == "range") & events["device"].isna()]
    if ranges.empty:
        return empty_steps()
    categories = ranges["name"].cat.categories
    number = {}
    for name in categories:
        match = pattern.search(str(name))
        if match:
            number[name] = _number(match)
    hits = ranges[ranges["name"].isin(list(number))]
    if hits.empty:
        return empty_steps()
    hits = hits.sort_values(["tid", "start_ns", "end_ns"], ascending=[True, True, False], kind="stable")
    starts, ends, tids = (hits[c].to_numpy() for c in ("start_ns", "end_ns", "tid"))
    pids = hits["pid"].to_numpy()
    same_thread = np.zeros(len(hits), dtype=bool)
    same_thread[:-1] = (tids[1:] == tids[:-1]) & (pids[1:] == pids[:-1])
    next_start = np.append(starts[1:], 0)
    next_end = np.append(ends[1:], 0)
    # a range that holds the next one on its thread is outer; a zero-length range holds nothing
    holds_next = same_thread & (next_start < ends) & (next_end <= ends) & (ends > starts)
    _warn_of_steps_holding_steps(hits, holds_next, warnings)
    inner = hits[~holds_next]
    steps = pd.DataFrame({
        "step": pd.array([number[n] for n in inner["name"]], dtype="Int64"),
        "name": inner["name"].astype(str).to_numpy(),
        "start_ns": inner["start_ns"].to_numpy(), "end_ns": inner["end_ns"].to_numpy(),
        "pid": inner["pid"].to_numpy(), "tid": inner["tid"].to_numpy(),
    }).sort_values(["pid", "tid", "start_ns"], kind="stable").reset_index(drop=True)
    _mend_ends(steps, events, warnings)
    steps = steps.sort_values("start_ns", kind="stable").reset_index(drop=True)
    renumber = None
    if steps["step"].isna().any():  # a pattern without a number group, or a number beyond 64 bits
        renumber = "some step ranges carry no usable number (" + _examples(steps.loc[steps["step"].isna(), "name"]) + ")"
    else:
        repeats = steps.duplicated(["pid", "tid", "step"], keep=False)
        if repeats.any():
            counts = steps.loc[repeats, "step"].value_counts()
            renumber = "step numbers repeat on one thread (" + ", ".join(
                f"step {int(s)} x{int(c)}" for s, c in counts.head(3).items()) + ")"
    if renumber:
        if pattern.groups:  # a pattern without a number group numbers its steps in order by design
            warnings.append(f"{renumber}: the {len(steps)} steps are numbered 0..{len(steps) - 1} in time order instead")
        steps["step"] = np.arange(len(steps))
    if not pattern.groups:  # by design, but said: `--steps step` also matches `Optimizer.step#SGD.step` ranges
        warnings.append(f"step pattern '{pattern.pattern}' has no (\\d+) group: the {len(steps)} steps are numbered "
                        f"0..{len(steps) - 1} in time order; "
                        + _name_kinds(hits.sort_values("start_ns", kind="stable")["name"].astype(str), steps["name"]))
    steps["dur_ns"] = steps["end_ns"] - steps["start_ns"]
    unique = steps.drop_duplicates("step", keep="first")
    if len(unique) < len(steps):
        threads = len(steps.drop_duplicates(["pid", "tid"]))
        warnings.append(f"step ranges of {threads} threads or processes share step numbers; each step number is "
                        f"counted once, by its first range ({len(steps) - len(unique)} ranges left out)")
    steps = unique.reset_index(drop=True)
    return steps[list(STEP_COLUMNS)].astype(STEP_COLUMNS)


def _warn_of_steps_holding_steps(hits: pd.DataFrame, outer: np.ndarray, warnings: list[str]) -> None:
    """An outer step range holds one step (``ProfilerStep#5`` around ``step 5``); one that holds two or more (a
    damaged end: ``step 3`` lasting 50 s around steps 4..6) is left out like any outer range, but said."""
    if not outer.any():
        return
    starts, ends = hits["start_ns"].to_numpy(), hits["end_ns"].to_numpy()
    thread = list(zip(hits["pid"].to_numpy(), hits["tid"].to_numpy()))
    swallowing = []
    for i in np.flatnonzero(outer):
        j, held = i + 1, 0  # hits are sorted by thread, then start: the ranges it holds follow it
        while j < len(hits) and thread[j] == thread[i] and starts[j] < ends[i] and held < 2:
            held += 1
            j += 1
        if held >= 2:
            swallowing.append(i)
    if swallowing:
        i = swallowing[0]
        warnings.append(f"{len(swallowing)} step ranges hold two or more other step ranges (e.g. "
                        f"{hits['name'].iat[i]}, {(ends[i] - starts[i]) / 1e6:g} ms long): a step cannot hold "
                        "steps, so each was left out and its steps counted without it")


def _mend_ends(steps: pd.DataFrame, events: pd.DataFrame, warnings: list[str]) -> None:
    """Cut overlapping step ranges and give ranges without a duration an end (steps sorted by thread, start)."""
    start = steps["start_ns"].to_numpy().copy()
    end = steps["end_ns"].to_numpy().copy()
    pid, tid = steps["pid"].to_numpy(), steps["tid"].to_numpy()
    has_next = np.zeros(len(steps), dtype=bool)
    has_next[:-1] = (tid[1:] == tid[:-1]) & (pid[1:] == pid[:-1])
    following = np.append(start[1:], 0)
    empty = end <= start
    overlap = has_next & ~empty & (end > following)
    if overlap.any():
        i = int(np.flatnonzero(overlap)[0])
        warnings.append(f"{int(overlap.sum())} step ranges overlap the next step on their thread without holding it "
                        f"(e.g. {steps['name'].iat[i]} ends {(end[i] - following[i]) / 1e3:g} us after "
                        f"{steps['name'].iat[i + 1]} begins); each was cut where the next one begins")
        end[overlap] = following[overlap]
    if empty.any():
        mended = empty & has_next
        end[mended] = np.maximum(following[mended], start[mended])
        for i in np.flatnonzero(empty & ~has_next):  # the last step of its thread: to its last event's end
            on_thread = ((events["pid"] == pid[i]) & (events["tid"] == tid[i]) & events["device"].isna()
                         & (events["start_ns"] >= start[i])).to_numpy()
            end[i] = max(int(events["end_ns"].to_numpy()[on_thread].max()) if on_thread.any() else start[i], start[i])
        warnings.append(f"{int(empty.sum())} step ranges have no duration (0, or missing in the file; e.g. "
                        f"{steps['name'].iat[int(np.flatnonzero(empty)[0])]}); each was taken to end where the next "
                        "step on its thread begins, or the last one where its thread's last event ends, so their "
                        "step times are estimates")
    steps["start_ns"], steps["end_ns"] = start, end


def _name_kinds(matched: pd.Series, counted: pd.Series) -> str:
    """How many kinds of range name (digits aside) a pattern matched, with examples, and which were counted."""
    def kinds(names: pd.Series) -> list[str]:
        names = names.drop_duplicates()
        return [str(n)[:40] for n in names.groupby(names.str.replace(r"\d+", "N", regex=True), sort=False).first()]

    found, steps = kinds(matched), kinds(counted)
    if len(found) == 1:
        return f"it matched one kind of range name ('{found[0]}')"
    shown = ", ".join(f"'{n}'" for n in found[:3]) + (", ..." if len(found) > 3 else "")
    return (f"it matched {len(found)} kinds of range name ({shown}), the innermost counted as steps "
            f"(e.g. '{steps[0]}'); if some are not your steps, give --steps a pattern that matches only the step "
            "ranges, with (\\d+) around the step number")


def _examples(names: pd.Series) -> str:
    shown = [str(n)[:40] for n in names.head(2)]
    return ", ".join(shown) + (", ..." if len(names) > 2 else "")


def _number(match: re.Match):
    """The first all-digit group of a step name's match, if it fits in 64 bits (else None)."""
    for group in match.groups():
        if group is not None and group.isdecimal() and group.isascii():
            return int(group) if len(group) <= 18 else None
    return None


def assign_steps(events: pd.DataFrame, steps: pd.DataFrame) -> pd.arrays.IntegerArray:
    """The step of every event (missing outside steps), by the rules in this module's docstring."""
    n = len(events)
    out = np.full(n, -1, dtype=np.int64)
    if steps.empty or not n:
        return pd.arrays.IntegerArray(out, out < 0)
    is_gpu = events["device"].notna().to_numpy()
    t = events["start_ns"].to_numpy()
    pid = events["pid"].to_numpy()
    tid = events["tid"].to_numpy()
    for step_pid, by_pid in steps.groupby("pid", sort=False):
        main_tid = by_pid["tid"].value_counts().index[0]
        stepping = set(by_pid["tid"])
        host_in_pid = (~is_gpu) & (pid == step_pid)
        for step_tid in stepping:
            own = by_pid[by_pid["tid"] == step_tid].sort_values("start_ns")
            rows = np.flatnonzero(host_in_pid & (tid == step_tid))
            found = in_disjoint(t[rows], own["start_ns"].to_numpy(), own["end_ns"].to_numpy())
            out[rows] = np.where(found >= 0, own["step"].to_numpy()[found], -1)
        main = by_pid[by_pid["tid"] == main_tid].sort_values("start_ns")
        rows = np.flatnonzero(host_in_pid & ~np.isin(tid, list(stepping)))
        found = in_disjoint(t[rows], main["start_ns"].to_numpy(), main["end_ns"].to_numpy())
        out[rows] = np.where(found >= 0, main["step"].to_numpy()[found], -1)
    _gpu_steps_from_launches(events, is_gpu, out)
    return pd.arrays.IntegerArray(out, out < 0)


def step_ended_before(steps: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """For each time, the step whose range ended last before it (the first step, for a time before any ended)."""
    ordered = steps.sort_values("end_ns")
    before = np.searchsorted(ordered["end_ns"].to_numpy(), times, side="right") - 1
    return ordered["step"].to_numpy(dtype=np.int64)[np.maximum(before, 0)]


def fill_gaps(events: pd.DataFrame, steps: pd.DataFrame) -> pd.arrays.IntegerArray:
    """The steps of ``assign_steps`` with the gaps between step ranges filled: a host event of a stepping process that
    starts after its first step's range opens and before its last one closes, in no step's range, gets the step
    whose range (on the process's stepping thread) ended last before it, and GPU work follows its launch. For the
    counts that must see all of the traced steps' work: code run between two ranges is the window's too."""
    step = events["step"]
    out = step.to_numpy(dtype=np.int64, na_value=-1).copy()
    if steps.empty or not len(events):
        return pd.arrays.IntegerArray(out, out < 0)
    is_gpu = events["device"].notna().to_numpy()
    t = events["start_ns"].to_numpy()
    pid = events["pid"].to_numpy()
    for step_pid, by_pid in steps.groupby("pid", sort=False):
        main = by_pid[by_pid["tid"] == by_pid["tid"].value_counts().index[0]]
        rows = np.flatnonzero((~is_gpu) & (pid == step_pid) & (out < 0) & (t >= main["start_ns"].min())
                              & (t < main["end_ns"].max()))
        out[rows] = step_ended_before(main, t[rows])
    _gpu_steps_from_launches(events, is_gpu, out)
    return pd.arrays.IntegerArray(out, out < 0)


def _gpu_steps_from_launches(events: pd.DataFrame, is_gpu: np.ndarray, out: np.ndarray) -> None:
    """GPU rows take the step of the cuda_api call with the same (process, correlation id)."""
    corr = events["correlation"]
    api = ((events["kind"] == "cuda_api") & corr.notna()).to_numpy()
    gpu = is_gpu & corr.notna().to_numpy()
    if not api.any() or not gpu.any():
        return
    pids = events["pid"].to_numpy()
    corr_values = corr.to_numpy(dtype=np.int64, na_value=-1)
    launches = pd.Series(out[api], index=pd.MultiIndex.from_arrays([pids[api], corr_values[api]]))
    launches = launches[~launches.index.duplicated()]
    keys = pd.MultiIndex.from_arrays([pids[gpu], corr_values[gpu]])
    out[gpu] = launches.reindex(keys).fillna(-1).to_numpy(dtype=np.int64)


def rows_in_steps(events: pd.DataFrame, rows: np.ndarray, exclude_steps=()) -> np.ndarray:
    """The rows among ``rows`` whose event lies in a step, leaving out the steps in ``exclude_steps``."""
    if not len(rows):
        return rows
    step = events["step"].to_numpy(dtype=np.int64, na_value=-1)[rows]
    keep = step >= 0
    if exclude_steps:
        keep &= ~np.isin(step, [int(s) for s in exclude_steps])
    return rows[keep]
