"""TraceAnalysis: one parsed trace and every analysis of it, each returning a DataFrame.

    from checker.trace import load
    trace = load("run.json.gz")            # or run.sqlite, run.nsys-rep, a TensorBoard folder
    trace.get_steps()
    trace.get_host_syncs(exclude_steps={0})
    trace.summary()                         # the dict behind `workbook report --json`

Counts are over the steps the trace marks. A trace without step ranges is analysed whole, as if it
were one step (``has_steps`` is False and the summary says so).

A damaged trace that can still be read is analysed, and ``get_warnings()`` says, one sentence each, what
the engine had to leave out or guess (from the reader, the step finder and the analyses); the report
prints them and ``summary()["warnings"]`` lists them. No count is quietly zero because the data behind
it was missing.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cached_property

import numpy as np
import pandas as pd

from checker.trace.analyses import calls as calls_mod
from checker.trace.analyses import copies as copies_mod
from checker.trace.analyses import counts, dataloader, diff, gpu_idle, kernels, ops, syncs
from checker.trace.errors import TraceError
from checker.trace.steps import DEFAULT_STEP_REGEX, assign_steps, compile_step_regex, fill_gaps, find_steps


class TraceAnalysis:
    """A trace's normalized events and its steps, with the analyses as ``get_<noun>()`` methods."""

    def __init__(self, events: pd.DataFrame, fmt: str, source: str = "", meta: dict | None = None,
                 step_regex: str | None = None, skip_steps: int = 0):
        if events.empty:
            left_out = [str(w) for w in (meta or {}).get("warnings", [])]
            if left_out:  # events were there, none of them usable: say why, not "no events"
                raise TraceError(f"{source}: no usable events: {'; '.join(left_out[:2])}")
            raise TraceError(f"{source}: the trace holds no events (was the profiler running while the program worked?)")
        self.format = fmt
        self.source = source
        self.meta = meta or {}
        self.warnings: list[str] = [str(w) for w in self.meta.get("warnings", [])]
        self.step_pattern: re.Pattern = compile_step_regex(step_regex)
        events = _drop_repeats(events, self.warnings)
        events = _one_process(events, self.step_pattern, fmt, self.warnings)
        _mend_times(events, self.warnings)
        _mend_bytes(events, self.warnings)
        steps = find_steps(events, self.step_pattern, self.warnings)
        _say_unterminated_steps(self.meta.get("unterminated_ranges") or {}, self.step_pattern, steps, source,
                                self.warnings)
        self.skipped_steps = [int(s) for s in steps["step"].iloc[:max(0, skip_steps)]]
        if skip_steps and len(steps) and skip_steps >= len(steps):
            raise TraceError(f"{source}: asked to skip {skip_steps} warm-up steps, but the trace has only "
                             f"{len(steps)}; skip fewer")
        self._steps = steps.iloc[max(0, skip_steps):].reset_index(drop=True)
        events["step"] = assign_steps(events, self._steps)
        _clip_to_steps(events, self._steps, self.warnings)
        self.events = events

    # ---- what the trace holds -------------------------------------------------------------------
    @property
    def has_steps(self) -> bool:
        return not self._steps.empty

    @property
    def step_count(self) -> int:
        return len(self._steps)

    @cached_property
    def has_cuda(self) -> bool:
        """True when the trace recorded CUDA: CUDA API calls, or GPU work (a GPU run traced with CUDA activity)."""
        return self.has_cuda_calls or self.has_gpu_work

    @cached_property
    def has_cuda_calls(self) -> bool:
        """True when the trace recorded CUDA API calls (launches, syncs, copies' calls)."""
        return syncs.has_cuda_calls(self.events)

    @cached_property
    def has_gpu_work(self) -> bool:
        return bool(self.events["kind"].isin(gpu_idle.GPU_WORK).any())

    @cached_property
    def has_call_lines(self) -> bool:
        """True when Python frames carry their call lines (torch.profiler >= 2.12 records them)."""
        return "call_from" in self.events and bool(self.events["call_from"].notna().any())

    @cached_property
    def has_python_frames(self) -> bool:
        return bool((self.events["kind"] == "python").any())

    def windows(self) -> pd.DataFrame:
        """The steps, or one window over the whole trace (step -1) when it has none."""
        if self.has_steps:
            return self._steps
        host = self.events[self.events["device"].isna()]
        frame = host if len(host) else self.events
        lo, hi = int(frame["start_ns"].min()), int(frame["end_ns"].max())
        return pd.DataFrame({"step": [-1], "name": ["(whole trace)"], "start_ns": [lo], "end_ns": [hi],
                             "dur_ns": [hi - lo], "pid": [-1], "tid": [-1]})

    # ---- what the engine had to leave out or guess ------------------------------------------------
    def get_warnings(self) -> list[str]:
        """One sentence per thing the engine had to leave out or guess in this trace (empty for a sound one)."""
        return self.warnings + self._analysis_warnings

    @cached_property
    def _analysis_warnings(self) -> list[str]:
        out = []
        events = self.events
        gpu = events["kind"].isin(gpu_idle.GPU_WORK).to_numpy()
        if gpu.any() and not self.has_cuda_calls:
            out.append(f"the trace holds {int(gpu.sum()):,} kernels and copies but no CUDA API calls (an empty CUDA "
                       "runtime table, or the calls were not traced): host syncs, launches and copy calls cannot be "
                       "seen, GPU work is in no step, and GPU idle time cannot be blamed on the host")
        elif gpu.any() and self.has_steps:
            unlinked = gpu & events["step"].isna().to_numpy()
            lo, hi = int(self._steps["start_ns"].min()), int(self._steps["end_ns"].max())
            start = events["start_ns"].to_numpy()
            during = unlinked & (start >= lo) & (start < hi)
            if during.any():  # only work without its call: work whose call is in no step (a step left out) is not
                rows = np.flatnonzero(during)
                during[rows[calls_mod.launch_rows(events, rows) >= 0]] = False
            if during.any():
                out.append(f"{int(during.sum()):,} kernels and copies ran during the steps but could not be linked "
                           "to the CUDA call that launched them (no correlation id, or no call with it): they count "
                           "in no step")
        if self.gpu_clock_skew:
            out.append(self.gpu_clock_skew)
        copies = self._all_copies
        unknown = copies[(copies["copy_kind"] == "unknown") | (copies["src_kind"] == "unknown")
                         | (copies["dst_kind"] == "unknown")]
        if len(unknown):
            out.append(f"{len(unknown):,} copies {'in the steps ' if self.has_steps else ''}have an unknown direction "
                       "or memory kind: the pageable and pinned copy counts leave them out")
        return out

    @cached_property
    def gpu_clock_skew(self) -> str | None:
        """The warning for GPU time stamps off from the host's (clock skew), else None; then GPU idle time is not
        given. Measured against each kernel's
        or copy's own launch (the CUDA call with its correlation id): none starts before its launch, so half of them
        doing so by more than GPU_EARLY_SLACK_NS is skew; behind a queue of launches any one may start long after its
        launch, but the first launched into an idle GPU starts at once, so every one starting more than
        GPU_LAG_LIMIT_NS after its launch is skew too. Then GPU idle time is not given."""
        events = self.events
        gpu = np.flatnonzero(events["kind"].isin(gpu_idle.GPU_WORK).to_numpy())
        launch = calls_mod.launch_rows(events, gpu)
        linked, launch = gpu[launch >= 0], launch[launch >= 0]
        if not len(linked):
            return None
        start = events["start_ns"].to_numpy()
        delta = start[linked] - start[launch]
        if np.median(delta) < -GPU_EARLY_SLACK_NS:
            early = int((delta < -GPU_EARLY_SLACK_NS).sum())
            where = f"{early:,} of {len(delta):,} started before the CUDA call that launched them, by up to " \
                    f"{-int(delta.min()) / 1e6:,.0f} ms"
        elif delta.min() > GPU_LAG_LIMIT_NS:
            where = f"all {len(delta):,} started at least {int(delta.min()) / 1e6:,.0f} ms after the CUDA call " \
                    "that launched them, none sooner"
        else:
            return None
        return (f"of the kernels and copies, {where}: the GPU's time stamps are off from the host's (clock skew), "
                "so GPU idle time is not given")

    # ---- steps -----------------------------------------------------------------------------------
    def get_steps(self) -> pd.DataFrame:
        """The steps, one row each: step, name, start_ns, end_ns, dur_ns, pid, tid (warm-ups skipped)."""
        return self._steps.copy()

    def window_steps(self) -> pd.Series:
        """Every event's step, with the gaps between two steps' ranges given to the step before (steps.fill_gaps)."""
        if getattr(self, "_window_steps", None) is None:
            self._window_steps = pd.Series(fill_gaps(self.events, self._steps), index=self.events.index)
        return self._window_steps

    def get_step_metrics(self, exclude_steps=()) -> pd.DataFrame:
        """One row per step: dur_ns, host_syncs, kernels, launches, gpu_busy_ns, gpu_idle_ns,
        gpu_idle_host_wait_ns, data_wait_ns."""
        base = self._steps[["step", "dur_ns"]]
        base = base[~base["step"].isin({int(s) for s in exclude_steps})]
        frame = base.merge(self.get_host_syncs_per_step(exclude_steps)[["step", "host_syncs"]], on="step", how="left")
        frame = frame.merge(self.get_kernels_per_step(exclude_steps)[["step", "kernels", "launches"]], on="step", how="left")
        idle = self.get_gpu_idle().rename(columns={"busy_ns": "gpu_busy_ns", "idle_ns": "gpu_idle_ns",
                                                   "idle_host_wait_ns": "gpu_idle_host_wait_ns"})
        frame = frame.merge(idle[["step", "gpu_busy_ns", "gpu_idle_ns", "gpu_idle_host_wait_ns"]], on="step", how="left")
        frame = frame.merge(self.get_data_wait(exclude_steps)[["step", "data_wait_ns"]], on="step", how="left")
        return frame.astype({"step": "int64", "dur_ns": "int64", "host_syncs": "int64", "kernels": "int64",
                             "launches": "int64", "gpu_busy_ns": "Int64", "gpu_idle_ns": "Int64",
                             "gpu_idle_host_wait_ns": "Int64", "data_wait_ns": "int64"})

    # ---- host syncs ------------------------------------------------------------------------------
    @cached_property
    def _all_syncs(self) -> pd.DataFrame:
        return self._whole_trace_step(syncs.host_syncs(self.events, in_steps=self.has_steps))

    def _whole_trace_step(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Without steps, rows count for the whole trace: step -1."""
        if not self.has_steps:
            frame = frame.assign(step=pd.array(np.full(len(frame), -1), dtype="Int64"))
        return frame

    def get_host_syncs(self, exclude_steps=()) -> pd.DataFrame:
        """One row per host sync inside a step: step, name, start_ns, dur_ns, tid, op, where.

        ``name`` is the CUDA call (cudaStreamSynchronize, ...) or, in a CPU-only trace, the aten op that
        would sync on a GPU; ``op`` the aten op it was made in; ``where`` the user's ``path:line`` (None
        without Python frames). Steps in exclude_steps (e.g. logging steps) are left out.
        """
        frame = self._all_syncs
        if exclude_steps:
            frame = frame[~frame["step"].isin([int(s) for s in exclude_steps])]
        return frame.reset_index(drop=True)

    def get_step_work(self) -> pd.DataFrame:
        """One row per step: step, work (GPU kernel ns, or on a CPU trace the backward pass's node evaluations),
        step_ns; see checker.trace.analyses.work."""
        from checker.trace.analyses.work import step_work

        return step_work(self.events, self._steps)

    def get_window_syncs(self, exclude_steps=()) -> pd.DataFrame:
        """Every host sync from the first step's start to the last step's end, between step ranges too (``between``:
        made where no step range was open; ``step`` is then the step before it), with the reads torch.optim's own code
        makes of CPU scalars marked ``optimizer_read`` rather than left out. Only syncs inside the ranges of the steps
        in exclude_steps are left out. Empty for a trace without steps."""
        return syncs.window_syncs(self.events, self._steps, exclude_steps)

    def get_host_syncs_per_step(self, exclude_steps=()) -> pd.DataFrame:
        """One row per step, steps without syncs included: step, host_syncs, sync_ns."""
        return syncs.syncs_per_step(self.get_host_syncs(exclude_steps), self.windows(), exclude_steps)

    def get_sync_sources(self, exclude_steps=()) -> pd.DataFrame:
        """Host syncs grouped by what made them: name, op, where, count, sync_ns; most frequent first."""
        return syncs.sync_sources(self.get_host_syncs(exclude_steps))

    # ---- copies ----------------------------------------------------------------------------------
    @cached_property
    def _all_copies(self) -> pd.DataFrame:
        return self._whole_trace_step(copies_mod.copies(self.events, in_steps=self.has_steps))

    def get_copies(self, exclude_steps=()) -> pd.DataFrame:
        """One row per memcpy inside a step: step, name, start_ns, dur_ns, bytes, copy_kind, src_kind,
        dst_kind, pageable, api (the launching call), cpu_blocked_ns, non_blocking_requested, where."""
        frame = self._all_copies
        if exclude_steps:
            frame = frame[~frame["step"].isin([int(s) for s in exclude_steps])]
        return frame.reset_index(drop=True)

    def get_pageable_copies(self, exclude_steps=()) -> pd.DataFrame:
        """The copies that read or write pageable host memory (same columns as get_copies)."""
        frame = self.get_copies(exclude_steps)
        return frame[frame["pageable"]].reset_index(drop=True)

    def get_copy_summary(self, exclude_steps=()) -> pd.DataFrame:
        """Copies by direction and memory kinds: count, bytes, gpu_ns, cpu_blocked_ns,
        non_blocking_requested, gb_per_s."""
        return copies_mod.copy_summary(self.get_copies(exclude_steps))

    # ---- GPU time --------------------------------------------------------------------------------
    @cached_property
    def _idle(self) -> pd.DataFrame:
        if self.gpu_clock_skew:  # GPU time stamps off from the host's: the GPU's busy time in a step is unknown
            return gpu_idle.empty_idle()
        return gpu_idle.gpu_idle(self.events, self.windows(), self._all_syncs)

    def get_gpu_idle(self, exclude_steps=()) -> pd.DataFrame:
        """One row per step: window_ns, busy_ns, idle_ns, idle_host_wait_ns, idle_other_ns, idle_after_sync_ns
        (of the host wait, what began while the host sat in a host sync), idle_fraction. Empty for a trace without
        GPU work."""
        idle = self._idle
        if exclude_steps:
            idle = idle[~idle["step"].isin([int(s) for s in exclude_steps])]
        return idle.reset_index(drop=True)

    def get_kernels_per_step(self, exclude_steps=()) -> pd.DataFrame:
        """One row per step: kernels, launches, kernel_ns, memcpys, memsets."""
        if not self.has_steps:
            return kernels.per_step(self.events, self.windows(), whole_trace=True)
        return kernels.per_step(self.events, self._steps, exclude_steps)

    def get_top_kernels(self, limit: int = 10, exclude_steps=()) -> pd.DataFrame:
        """The kernels with the most GPU time in the steps: name, family, count, total_ns, mean_ns, share,
        per_step."""
        work = kernels.gpu_work(self.events, self.has_steps, exclude_steps)
        return kernels.top_kernels(work, self._counted_steps(exclude_steps), limit)

    def get_kernel_families(self, exclude_steps=()) -> pd.DataFrame:
        """GPU time by kernel family (gemm/conv, fused/triton, reduction, elementwise, memcpy/memset,
        other): family, count, total_ns, share, per_step."""
        work = kernels.gpu_work(self.events, self.has_steps, exclude_steps)
        return kernels.kernel_families(work, self._counted_steps(exclude_steps))

    def _counted_steps(self, exclude_steps=()) -> int:
        if not self.has_steps:
            return 1
        return int((~self._steps["step"].isin({int(s) for s in exclude_steps})).sum())

    # ---- host time per op -------------------------------------------------------------------------
    def get_top_ops(self, limit: int | None = 15, exclude_steps=(), sort_by: str = "self_ns") -> pd.DataFrame:
        """CPU ops (aten ops and the like) in the steps by name: count, self_ns, total_ns, count_per_step,
        self_ms_per_step, total_ms_per_step; sorted by sort_by ("self_ns", as torch.profiler's
        ``sort_by="self_cpu_time_total"``, or "count"). Empty for a trace without CPU ops (nsys)."""
        if sort_by not in ("self_ns", "count"):
            raise ValueError(f"sort_by={sort_by!r}: choose 'self_ns' or 'count'")
        return ops.top_ops(self.events, self.has_steps, self._counted_steps(exclude_steps), exclude_steps, limit, sort_by)

    def get_cpu_ops(self, exclude_steps=()) -> pd.DataFrame:
        """One row per CPU op in the steps: step, name, pid, tid, start_ns, end_ns, self_ns, top_level (no CPU
        op of its thread holds it). Typed columns even when empty (a trace whose steps hold no aten ops)."""
        return ops.cpu_ops(self.events, self.has_steps, exclude_steps)

    # ---- data loading ----------------------------------------------------------------------------
    def count_launches(self, device: str) -> "counts.StepCount":
        """Kernel launches per step (a cudaGraphLaunch counts once), or top-level aten ops per step on a CPU."""
        return counts.count_launches(self, device)

    def count_elementwise(self, device: str) -> "counts.StepCount":
        """Elementwise, normalization and reduction kernels per step, or such top-level aten ops on a CPU."""
        return counts.count_elementwise(self, device)

    def get_hottest_kernels(self, limit: int | None = 5) -> pd.DataFrame:
        """Elementwise-family kernels by GPU time per step (see counts.hottest_kernels)."""
        return counts.hottest_kernels(self, limit)

    def get_top_level_ops(self) -> pd.DataFrame:
        """aten ops not called from inside another aten op on the same thread (every step, every thread)."""
        return counts.top_level_aten_ops(self.events)

    def get_data_wait(self, exclude_steps=(), loading: str | None = None, preparing: str | None = None) -> pd.DataFrame:
        """One row per step: step_ns, data_wait_ns, data_wait_fraction, source; ``loading``: Python frames that
        make samples, ``preparing``: the calls that prepare one, both counted as waiting wherever they run in a
        step (checker.trace.analyses.dataloader)."""
        return dataloader.data_wait(self.events, self._steps, exclude_steps, loading, preparing)

    def get_sample_preparations(self, calls: str, exclude_steps=()) -> pd.DataFrame:
        """One row per call matching ``calls`` (what preparing a sample cannot do without) in the traced steps:
        step, tid, call, and the frame that prepared that sample (start_ns, end_ns, frame)."""
        steps = self._steps[~self._steps["step"].isin({int(x) for x in exclude_steps})]
        return dataloader.sample_preparations(self.events, steps, calls)

    def get_fetch_ops(self) -> dict[int, Counter]:
        """Per traced step, the aten ops run inside its fetch of a batch, on the fetching thread (by name)."""
        return dataloader.fetch_ops(self.events)

    def get_script_frames_in_fetches(self) -> Counter:
        """The script's own Python frames run inside the traced steps' fetches, by name."""
        return dataloader.script_frames_in_fetches(self.events)

    def get_data_wait_gpu_idle(self, exclude_steps=()) -> pd.DataFrame:
        """One row per step: data_wait_ns, gpu_idle_ns (the GPU idle through it), after_sync_ns (of that, idle
        time that began while the host sat in a host sync). Empty for a trace without GPU work, or whose GPU time
        stamps are off from the host's."""
        if self.gpu_clock_skew:
            return dataloader.empty_idle()
        return dataloader.data_wait_gpu_idle(self.events, self._steps, self._all_syncs, exclude_steps)

    # ---- two traces ------------------------------------------------------------------------------
    def get_diff(self, baseline: "TraceAnalysis") -> pd.DataFrame:
        """What changed from baseline to this trace, per step: kind, name, before_per_step,
        after_per_step, change_per_step, status (disappeared, appeared, fewer, more)."""
        return diff.event_diff(baseline, self)

    def get_summary_diff(self, baseline: "TraceAnalysis") -> pd.DataFrame:
        """The summary's per-step numbers before (baseline) and after (this trace): metric, label,
        before, after, change, ratio."""
        return diff.summary_diff(baseline.summary(), self.summary())

    # ---- reports ---------------------------------------------------------------------------------
    def summary(self, exclude_steps=()) -> dict:
        """The dict behind `workbook report --json` (see checker.trace.report for its keys); steps in
        exclude_steps (logging steps) are left out of every count."""
        from checker.trace.report import build_summary

        key = tuple(sorted({int(s) for s in exclude_steps}))
        cache = self.__dict__.setdefault("_summaries", {})
        if key not in cache:
            cache[key] = build_summary(self, exclude_steps=set(key))
        return cache[key]

    def timeline(self, out, baseline: "TraceAnalysis | None" = None, **kwargs) -> None:
        """Draw the timeline picture (PNG or SVG by the file name); with baseline, before above after."""
        from checker.trace.timeline import draw_timeline

        draw_timeline(self, out, baseline=baseline, **kwargs)

    def __repr__(self) -> str:
        return (f"TraceAnalysis({self.source!r}, format={self.format!r}, events={len(self.events)}, "
                f"steps={self.step_count})")


REPEAT_KEY = ["kind", "name", "start_ns", "end_ns", "pid", "tid", "device", "stream", "correlation"]


def _drop_repeats(events: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """An event recorded twice (the same kind, name, times, thread and correlation: a trace merged with itself,
    a table copied into itself) is counted once: a second copy of every call doubled the syncs and paired each
    copy with its own twin instead of the sync after it."""
    repeated = events.duplicated(subset=[c for c in REPEAT_KEY if c in events], keep="first").to_numpy()
    if not repeated.any():
        return events
    warnings.append(f"{int(repeated.sum()):,} events appear twice or more (the same name, times, thread and "
                    "correlation); each is counted once")
    return events[~repeated].reset_index(drop=True)


def _say_unterminated_steps(unterminated: dict, pattern: re.Pattern, steps: pd.DataFrame, source: str,
                            warnings: list[str]) -> None:
    """Step ranges an nsys export holds without an end (NVTX ranges never closed: the capture stopped inside them,
    or a damaged export) cannot be measured and are left out by the reader: said, or, when no step is left,
    refused, rather than reported as a step pattern that matched nothing."""
    named = {str(n): int(c) for n, c in unterminated.items() if pattern.search(str(n))}
    if not named:
        return
    count = sum(named.values())
    shown = ", ".join(sorted(named, key=_natural)[:3]) + (", ..." if len(named) > 3 else "")
    if steps.empty:
        raise TraceError(f"{source}: every one of its {count:,} step ranges ({shown}) has no end (NVTX ranges never "
                         "closed: `end` is NULL in the export, as when the capture stops inside them), so no step "
                         "can be measured; close each step's range before the capture ends, and export again")
    warnings.append(f"{count:,} step range{'s' if count > 1 else ''} ({shown}) {'have' if count > 1 else 'has'} no "
                    "end (NVTX ranges never closed: `end` is NULL in the export, as when the capture stops inside "
                    f"them): {'those steps are' if count > 1 else 'that step is'} left out")


def _natural(name: str):
    """'step 10' after 'step 9'."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _one_process(events: pd.DataFrame, pattern: re.Pattern, fmt: str, warnings: list[str]) -> pd.DataFrame:
    """Step ranges in two or more host processes (two programs' traces merged, or one copied under a second pid) would
    count both programs' steps, syncs and copies as one's, and in a Kineto trace leave its GPU work, filed under the
    device, with no process to link it to its launches. The process with the most step ranges (on a tie, the first to
    start one) is counted; the others' events are left out, and said."""
    ranges = events[(events["kind"] == "range") & events["device"].isna()]
    names = [n for n in ranges["name"].astype(str).unique() if pattern.search(n)]
    hits = ranges[ranges["name"].astype(str).isin(names)]
    if hits["pid"].nunique() < 2:
        return events
    per_pid = hits.groupby("pid")["start_ns"].agg(["size", "min"]).sort_values(["size", "min"],
                                                                                 ascending=[False, True])
    kept, others = int(per_pid.index[0]), [int(p) for p in per_pid.index[1:]]
    why = ("the most" if per_pid["size"].iat[0] > per_pid["size"].iat[1] else
           f"as many as pid {others[0]}, and the first to start one")
    drop = events["pid"].isin(others).to_numpy()
    if fmt == "kineto":  # its GPU rows carry the device, not the process: those stay, to be linked to pid kept's calls
        drop = drop & events["device"].isna().to_numpy()
    warnings.append(f"step ranges come from {len(per_pid)} host processes (pids {kept}, "
                    f"{', '.join(map(str, others[:3]))}{', ...' if len(others) > 3 else ''}): only pid {kept} is "
                    f"counted ({int(per_pid['size'].iat[0]):,} step ranges, {why}); "
                    + (f"pid {others[0]}'s" if len(others) == 1 else f"the other {len(others)} processes'")
                    + f" {int(drop.sum()):,} events are left out")
    events = events[~drop].reset_index(drop=True)
    if fmt == "kineto":
        from checker.trace.kineto import host_pid_for_gpu_rows

        host_pid_for_gpu_rows(events)
    return events


# GPU work starts after the call that launched it (the clocks' rounding aside), and the first launched into an idle
# GPU starts at once: most of a trace's GPU work before its launch, or all of it this long after, is clock skew
GPU_EARLY_SLACK_NS = 1_000_000
GPU_LAG_LIMIT_NS = 1_000_000_000

# An event may outlast the other events' starts (a long last kernel, the range around everything), never by this much
OUTLAST_SLACK_NS = 60_000_000_000


def _mend_times(events: pd.DataFrame, warnings: list[str]) -> None:
    """Events that end before they start, or that last more than twice the whole trace and a minute besides (an end
    far past every other event's start), come from a damaged export: each is taken to end where it starts."""
    start, end = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    backwards = end < start
    if backwards.any():
        warnings.append(f"{int(backwards.sum()):,} events end before they start (a negative duration); taken as 0")
        events.loc[backwards, "end_ns"] = start[backwards]
    span = int(start.max()) - int(start.min()) if len(start) else 0
    endless = (end - start) > 2 * span + OUTLAST_SLACK_NS
    if endless.any():
        warnings.append(f"{int(endless.sum()):,} events last far longer than the whole trace (more than twice the "
                        "time between its first and last start, and a minute besides); taken as 0")
        events.loc[endless, "end_ns"] = start[endless]


OVERRUN_SLACK_NS = 1_000  # time stamps in microseconds, rounded: a call may seem to end a little after its step


def _clip_to_steps(events: pd.DataFrame, steps: pd.DataFrame, warnings: list[str]) -> None:
    """A CUDA call or a range on a step's own thread ends inside that step (the step's range encloses it): one that
    ends after it (a damaged end) is cut at the step's end, so that no wait counts for more than its step. Python
    frames are left alone: the frame that closes the step's own range ends just after it."""
    if steps.empty or events.empty:
        return
    step = events["step"].to_numpy(dtype=np.int64, na_value=-1)
    host = events["kind"].isin(("cuda_api", "range")).to_numpy() & (step >= 0)
    if not host.any():
        return
    # each step's end, and whether the row runs on a thread that carries step ranges: two lookups, no Python loop
    step_end = pd.Series(steps["end_ns"].to_numpy(dtype=np.int64), index=steps["step"].to_numpy(dtype=np.int64))
    stepping = pd.MultiIndex.from_arrays([steps["pid"].to_numpy(), steps["tid"].to_numpy()])
    rows = np.flatnonzero(host)
    own = pd.MultiIndex.from_arrays([events["pid"].to_numpy()[rows], events["tid"].to_numpy()[rows]]).isin(stepping)
    rows = rows[own]
    if not len(rows):
        return
    limit = step_end.reindex(step[rows]).to_numpy(dtype=np.int64)
    end = events["end_ns"].to_numpy()[rows]
    over = end > limit + OVERRUN_SLACK_NS
    if over.any():
        warnings.append(f"{int(over.sum()):,} host calls or ranges end after the step they started in (a damaged "
                        "end, or a step range that ended too soon); cut at the step's end")
        events.loc[events.index[rows[over]], "end_ns"] = limit[over]


MAX_COPY_BYTES = 1 << 40  # 1 TiB: more than any GPU's memory, so no one copy or set moves more


def _mend_bytes(events: pd.DataFrame, warnings: list[str]) -> None:
    """Byte counts below zero or beyond any GPU's memory (damage; summed, they wrapped around int64) are taken as
    missing."""
    if "bytes" not in events:
        return
    values = events["bytes"]
    bad = (values.notna() & ((values < 0) | (values > MAX_COPY_BYTES))).to_numpy(dtype=bool, na_value=False)
    if bad.any():
        warnings.append(f"{int(bad.sum()):,} copies or sets give a byte count below zero or above 1 TiB; taken as "
                        "unknown")
        events.loc[bad, "bytes"] = pd.NA


def load(path, step_regex: str | None = None, skip_steps: int = 0) -> TraceAnalysis:
    """Read a trace (format detected from the content) and find its steps.

    path: a torch.profiler trace (.json, .json.gz, or a TensorBoard trace folder), an nsys SQLite
    export (.sqlite or .sqlite.gz) or an .nsys-rep (needs nsys). step_regex: the step range pattern
    (default ``^(?:ProfilerStep#|step |batch |iteration )(\\d+)$``, group 1 the step number).
    skip_steps: drop this many steps at the start (warm-up). Raises TraceError for bad input.
    """
    from checker.trace.loader import read_events

    events, meta, fmt = read_events(path)
    return TraceAnalysis(events, fmt, source=str(path), meta=meta, step_regex=step_regex, skip_steps=skip_steps)


def load_after_warmup(path, first_step: int) -> tuple[TraceAnalysis, TraceAnalysis | None]:
    """A trace that records the warm-up's steps before the window's (a chapter's ``trace_warmup``), read once: (the
    window's trace, as a profiler started at the window would have recorded it; the whole trace, or None where it
    holds no step before ``first_step``).

    The window's trace holds what starts after the last warm-up step's range ends (where the harness opens the
    window); a Python frame still running there (the script's loop) is kept from that moment on, as the profiler's
    Python tracer records the frames it finds on the stack when it starts. Every rule that judges the window then
    reads what it read before the warm-up was traced."""
    from checker.trace.loader import read_events

    events, meta, fmt = read_events(path)
    whole = TraceAnalysis(events.copy(), fmt, source=str(path), meta=meta)
    steps = whole.get_steps()
    early = steps[steps["step"] < first_step]
    if early.empty:
        return whole, None
    cut = int(early["end_ns"].max())
    frames = (events["kind"] == "python") & (events["start_ns"] < cut) & (events["end_ns"] > cut)
    window = events[(events["start_ns"] >= cut) | frames].copy()
    window.loc[frames[frames].index, "start_ns"] = cut
    return TraceAnalysis(window.reset_index(drop=True), fmt, source=str(path), meta=_meta_after(meta, cut)), whole


def _meta_after(meta: dict, cut: int) -> dict:
    """``meta`` with its per-op tables (the products, the ops' inputs, the sized ops: columns beside ``start_ns``) cut
    to the rows that start at ``cut`` or later, as the events are."""
    kept = dict(meta)
    for key, table in meta.items():
        if isinstance(table, dict) and isinstance(table.get("start_ns"), list):
            rows = [i for i, start in enumerate(table["start_ns"]) if start >= cut]
            kept[key] = {column: [values[i] for i in rows] if isinstance(values, list) else values
                         for column, values in table.items()}
    return kept


__all__ = ["DEFAULT_STEP_REGEX", "TraceAnalysis", "load", "load_after_warmup"]
