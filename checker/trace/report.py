"""The report: a summary dict (what `workbook report --json` prints) and its text, most costly finding first.

Keys of the summary (other tools read them; counts are over the steps found, or over the whole trace
when the trace marks none, which ``steps_found`` and the notes say):

- ``format`` ("kineto" | "nsys"), ``source``, ``cuda`` (bool: the trace has CUDA calls or GPU work),
  ``steps`` (int: the steps counted), ``steps_found`` (bool), ``step_numbers`` (list: the steps counted),
  ``skipped_steps`` (list), ``logging_steps_excluded`` (list), ``step_ms_median`` / ``step_ms_mean``
  (float | null)
- ``host_syncs_in_steps`` (int), ``host_syncs_per_step`` (float), ``host_sync_ms_per_step`` (float),
  ``sync_sources``: [{"name", "count", "where", "op", "in_fetch"}] (most frequent first; in_fetch: made while the
  harness fetched the step's batch)
- ``pageable_h2d_copies`` (int), ``pageable_h2d_bytes`` (int), ``pageable_h2d_per_step`` (float),
  ``pageable_copy_cpu_ms_per_step`` (float), ``non_blocking_pageable_copies`` (int),
  ``pinned_h2d_copies`` (int)
- ``kernels_per_step`` (float), ``launches_per_step`` (float), ``kernel_families``: [{"family", "share",
  "count"}], ``top_kernels``: [{"name", "family", "count", "total_ms", "share"}]
- ``gpu_idle_fraction`` (float | null: null without GPU work), ``gpu_idle_host_wait_fraction``,
  ``gpu_idle_after_sync_fraction`` (the step time the GPU sat idle in gaps that began while the host was in a host
  sync: the queue ran dry there, and the GPU waited for the host's next launch)
- ``data_wait_fraction`` (float | null: null without data ranges), ``data_wait_gpu_idle_fraction`` (of that
  wait, the share the GPU had nothing to run; null without GPU work or data ranges),
  ``data_wait_after_sync_fraction`` (the step time the GPU sat idle in data waits that began while the host
  was in a host sync: the cost a sync adds by leaving the queue empty while the next batch is prepared)
- ``top_level_ops_per_step`` (float: aten ops called from Python, not from another op; on a GPU each is at
  least one launch), ``host_ms_per_op`` (float | null: the median over steps of the step's time outside its data
  wait per top-level op; a CPU trace's cost of an op, dispatch included; null with GPU work or without ops)
- ``top_ops``: [{"name", "count_per_step", "self_ms_per_step", "total_ms_per_step"}], the 15 CPU ops with the
  most self time per step (as torch.profiler's ``key_averages().table(sort_by="self_cpu_time_total")``),
  ``top_ops_by_count``: the same for the 15 most frequent
- ``findings`` (list of str, most costly first), ``notes`` (list of str), ``warnings`` (list of str: what
  the engine had to leave out or guess in a damaged trace; empty for a sound one)
"""

from __future__ import annotations

import math

import numpy as np

from checker.trace.nsys import GRAPH_PREFIX


def _num(value, digits: int = 4):
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else round(value, digits)


def build_summary(trace, exclude_steps=frozenset()) -> dict:
    excluded = sorted({int(x) for x in exclude_steps} & {int(x) for x in trace.get_steps()["step"]})
    ex = set(excluded)
    steps = trace.get_steps()
    steps = steps[~steps["step"].isin(ex)]
    if trace.has_steps and steps.empty:
        from checker.trace.errors import TraceError

        raise TraceError(f"{trace.source}: every one of its {trace.step_count} steps is a logging step, so no step "
                         "is left to count; check --log-every")
    counted = max(len(steps), 1)
    window_ns = float(steps["dur_ns"].sum()) if trace.has_steps else float(trace.windows()["dur_ns"].sum())
    notes = []
    if not trace.has_steps:
        notes.append(f"no step ranges matched {trace.step_pattern.pattern}: counts are over the whole trace")
    if trace.skipped_steps:
        notes.append(f"skipped {len(trace.skipped_steps)} warm-up steps ({_steps_text(trace.skipped_steps)})")
    if excluded:
        notes.append(f"left out {len(excluded)} logging steps ({_steps_text(excluded)}), where reading values on "
                     "the host is allowed, as the checks do")
    if not trace.has_cuda:
        notes.append("no CUDA calls in the trace (CPU-only): host syncs are the aten ops that would sync on a GPU "
                     "(_local_scalar_dense, nonzero); copies and GPU idle time cannot be seen")
        resident = _cpu_resident_reads(trace, ex)
        if resident:
            notes.append(f"{resident} reads of CPU-resident scalars (the optimizer's step counters: .item() in "
                         "torch.optim's _get_value or a fused optimizer op) are not counted as host syncs: on a GPU "
                         "they read CPU memory or run on the GPU, without a sync")
    graphs = _whole_graphs(trace, ex)
    if graphs:
        notes.append(f"{graphs} CUDA graph replays were traced as whole graphs (`CUDA graph <id>` rows: their GPU "
                     "time counts, but not their kernels one by one); `nsys profile --cuda-graph-trace=node` lists "
                     "the kernels inside")
    if trace.has_cuda and not trace.has_python_frames:
        notes.append("no Python frames in the trace, so syncs are not traced to a line "
                     "(torch.profiler with_stack=True records them; nsys does not)")

    syncs = trace.get_host_syncs(ex)
    sources = trace.get_sync_sources(ex)
    copies = trace.get_copies(ex)
    h2d = copies[copies["copy_kind"] == "HtoD"]
    pageable_h2d = h2d[h2d["src_kind"] == "pageable"]
    pageable_any = copies[copies["pageable"]]
    per_step = trace.get_kernels_per_step(ex)
    idle = trace.get_gpu_idle(ex)
    wait = trace.get_data_wait(ex)
    families = trace.get_kernel_families(ex)
    top = trace.get_top_kernels(limit=5, exclude_steps=ex)
    top_ops = trace.get_top_ops(limit=15, exclude_steps=ex)
    top_ops_by_count = trace.get_top_ops(limit=15, exclude_steps=ex, sort_by="count")

    idle_fraction = host_wait_fraction = idle_after_sync_fraction = None
    if len(idle) and idle["window_ns"].sum() > 0:
        idle_fraction = idle["idle_ns"].sum() / idle["window_ns"].sum()
        host_wait_fraction = idle["idle_host_wait_ns"].sum() / idle["window_ns"].sum()
        idle_after_sync_fraction = idle["idle_after_sync_ns"].sum() / idle["window_ns"].sum()
    data_fraction = data_idle_fraction = after_sync_fraction = None
    if len(wait) and (wait["source"] != "none").any() and wait["step_ns"].sum() > 0:
        data_fraction = wait["data_wait_ns"].sum() / wait["step_ns"].sum()
        fed = trace.get_data_wait_gpu_idle(ex)
        if len(fed) and fed["data_wait_ns"].sum() > 0:
            data_idle_fraction = fed["gpu_idle_ns"].sum() / fed["data_wait_ns"].sum()
            after_sync_fraction = fed["after_sync_ns"].sum() / wait["step_ns"].sum()

    summary = {
        "format": trace.format,
        "source": trace.source,
        "steps": int(len(steps)),
        "steps_found": bool(trace.has_steps),
        "cuda": bool(trace.has_cuda),
        "step_numbers": [int(s) for s in steps["step"]],
        "skipped_steps": list(trace.skipped_steps),
        "logging_steps_excluded": excluded,
        "step_ms_median": _num(steps["dur_ns"].median() / 1e6) if len(steps) else None,
        "step_ms_mean": _num(steps["dur_ns"].mean() / 1e6) if len(steps) else None,
        "host_syncs_in_steps": int(len(syncs)),
        "host_syncs_per_step": _num(len(syncs) / counted),
        "host_sync_ms_per_step": _num(syncs["dur_ns"].sum() / 1e6 / counted),
        "sync_sources": [{"name": r.name, "count": int(r.count), "where": r.where, "op": r.op,
                          "in_fetch": bool(r.in_fetch)} for r in sources.itertuples(index=False)],
        "pageable_h2d_copies": int(len(pageable_h2d)),
        "pageable_h2d_bytes": int(pageable_h2d["bytes"].fillna(0).sum()),
        "pageable_h2d_per_step": _num(len(pageable_h2d) / counted),
        "pageable_copy_cpu_ms_per_step": _num(pageable_any["cpu_blocked_ns"].sum() / 1e6 / counted),
        "non_blocking_pageable_copies": int(pageable_any["non_blocking_requested"].sum()),
        "pinned_h2d_copies": int((h2d["src_kind"] == "pinned").sum()),
        "kernels_per_step": _num(per_step["kernels"].sum() / counted),
        "launches_per_step": _num(per_step["launches"].sum() / counted),
        "top_level_ops_per_step": _num(_top_level_ops(trace, ex) / counted),
        "host_ms_per_op": None if trace.has_cuda else _host_ms_per_op(trace, ex, wait),
        "kernel_families": [{"family": r.family, "share": _num(r.share), "count": int(r.count)}
                            for r in families.itertuples(index=False) if r.count],
        "top_kernels": [{"name": r.name, "family": r.family, "count": int(r.count),
                         "total_ms": _num(r.total_ns / 1e6), "share": _num(r.share)} for r in top.itertuples(index=False)],
        "gpu_idle_fraction": _num(idle_fraction),
        "gpu_idle_host_wait_fraction": _num(host_wait_fraction),
        "gpu_idle_after_sync_fraction": _num(idle_after_sync_fraction),
        "data_wait_fraction": _num(data_fraction),
        "data_wait_gpu_idle_fraction": _num(data_idle_fraction),
        "data_wait_after_sync_fraction": _num(after_sync_fraction),
        "top_ops": _ops_rows(top_ops),
        "top_ops_by_count": _ops_rows(top_ops_by_count),
        "notes": notes,
        "warnings": list(trace.get_warnings()),
    }
    summary["findings"] = [text for _cost, text in sorted(_findings(summary, syncs, pageable_any, window_ns),
                                                          key=lambda f: -f[0])]
    return summary


def _top_level_ops(trace, excluded: set) -> int:
    """Top-level aten ops in the counted steps (the whole trace when it marks none)."""
    from checker.trace.analyses.counts import top_level_aten_ops

    ops = top_level_aten_ops(trace.events)
    if trace.has_steps:
        ops = ops[ops["step"].notna() & ~ops["step"].isin(excluded)]
    return int(len(ops))


def _host_ms_per_op(trace, excluded: set, wait) -> float | None:
    """The median over the counted steps of (step time - data wait) / top-level ops: what one op costs the host,
    dispatch included. The median of steps, not the mean: a step the machine took away from the run (another
    process on a shared CPU) moves a mean of a few steps by itself."""
    from checker.trace.analyses.counts import top_level_aten_ops

    if not trace.has_steps or not len(wait):
        return None
    ops = top_level_aten_ops(trace.events)
    ops = ops[ops["step"].notna() & ~ops["step"].isin(excluded)]
    per_step = ops.groupby(ops["step"].astype("int64")).size()
    rows = [(int(r.step_ns) - int(r.data_wait_ns)) / per_step[int(r.step)]
            for r in wait.itertuples(index=False) if per_step.get(int(r.step), 0) > 0 and r.step_ns > 0]
    return _num(float(np.median(rows)) / 1e6, 5) if rows else None


def _ops_rows(frame) -> list[dict]:
    return [{"name": r.name, "count_per_step": _num(r.count_per_step), "self_ms_per_step": _num(r.self_ms_per_step),
             "total_ms_per_step": _num(r.total_ms_per_step)} for r in frame.itertuples(index=False)]


# below this share of step time idle, the GPU is the wall: the host's waits are for its kernels
GPU_BOUND_IDLE = 0.10


def _cpu_resident_reads(trace, excluded: set) -> int:
    """How many CPU sync ops in the counted steps read a CPU-resident scalar (not counted as syncs)."""
    from checker.trace.analyses.syncs import cpu_resident_reads, cpu_sync_op_rows
    from checker.trace.steps import rows_in_steps

    events = trace.events
    rows = cpu_sync_op_rows(events)
    if trace.has_steps:
        rows = rows_in_steps(events, rows, excluded)
    return int(cpu_resident_reads(events, rows).sum())


def _whole_graphs(trace, excluded: set) -> int:
    """How many whole-graph rows (nsys without --cuda-graph-trace=node) fall in the counted steps."""
    from checker.trace.steps import rows_in_steps

    events = trace.events
    rows = np.flatnonzero(((events["kind"] == "kernel")
                           & events["name"].astype(str).str.startswith(GRAPH_PREFIX)).to_numpy())
    if trace.has_steps and len(rows):
        rows = rows_in_steps(events, rows, excluded)
    return len(rows)


def _steps_text(numbers: list[int]) -> str:
    """[5, 6, 7, 8, 10] -> 'steps 5..8, 10'; runs of three or more are written as ranges."""
    if not numbers:
        return "none"
    runs, start = [], 0
    for i in range(1, len(numbers) + 1):
        if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
            run = numbers[start:i]
            runs.append(f"{run[0]}..{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
            start = i
    return ("step " if len(numbers) == 1 else "steps ") + ", ".join(runs)


SYNC_SOURCES_SHOWN = 4  # places a report's sync line names; the rest are summed in one more part


def _per(count: float, steps: int) -> str:
    return f"{count / steps:g}" if steps else str(count)


def _findings(s: dict, syncs, pageable, window_ns: float) -> list[tuple[float, str]]:
    """(rank, sentence) for each problem found: causes (syncs, pageable copies, data waits) by the share of
    step time they cost, then GPU idle time, the symptom they explain."""
    out = []
    steps = max(s["steps"], 1)
    scope = f"in {s['steps']} steps" if s["steps_found"] else "in the whole trace"
    # a GPU busy through (nearly) the whole step: the host's waits (syncs, pageable copies) wait for kernels that
    # had work queued, so they cost the step at most the GPU's idle share; the kernels are the wall
    idle = s["gpu_idle_fraction"]
    gpu_bound = idle is not None and idle < GPU_BOUND_IDLE and bool(s["kernels_per_step"])
    busy = (f"; but the GPU was busy {1 - idle:.0%} of the step: these waits are for kernels already queued, and "
            "cost little until the kernels get faster") if gpu_bound else ""
    if gpu_bound:
        top = s["top_kernels"][0] if s["top_kernels"] else None
        if top is None:
            tail = ""
        elif str(top["name"]).startswith(GRAPH_PREFIX):  # a whole replayed graph: its kernels are not listed
            tail = (f"; a whole CUDA graph takes {top['share']:.0%} of GPU time: trace again with "
                    "`nsys profile --cuda-graph-trace=node` to see which of its kernels to give Nsight Compute")
        else:
            tail = f"; the top kernel takes {top['share']:.0%} of GPU time (Nsight Compute on it is next)"
        out.append((1.0 - idle, f"GPU busy {1 - idle:.0%} of step time: the kernels are the wall" + tail))
    if s["host_syncs_in_steps"]:
        # never more than the steps: calls a damaged trace let overlap (the warnings say so) cannot cost more
        cost = min(1.0, float(syncs["dur_ns"].sum()) / window_ns) if window_ns else 0.0
        parts = []
        shown = s["sync_sources"] if len(s["sync_sources"]) <= SYNC_SOURCES_SHOWN else s["sync_sources"][:SYNC_SOURCES_SHOWN - 1]
        for src in shown:  # every sync counted is in one part, so that the parts add up to the total
            origin = " in ".join(x for x in (src["op"], src["where"]) if x)
            if src.get("in_fetch"):
                origin = ("while session.steps() fetched the next batch: the DataLoader, its sampler or dataset"
                          + (f", iterated at {src['where']}" if src["where"] else ""))
            parts.append(f"{_per(src['count'], steps)}/step {src['name']}" + (f" ({origin})" if origin else ""))
        rest = s["sync_sources"][len(shown):]
        if rest:
            parts.append(f"{_per(sum(r['count'] for r in rest), steps)}/step from {len(rest)} other places "
                         "(`--json` lists every one)")
        waited = f", waiting {cost:.0%} of step time" if cost >= 0.005 else ""
        # a sync also costs the GPU the batch preparation that follows it: the queue it emptied stays empty
        drained = s.get("data_wait_after_sync_fraction") or 0.0
        if drained >= 0.01:
            waited += f", then leaving the GPU idle {drained:.0%} of step time while the next batch was prepared"
        cost += drained
        if gpu_bound:
            cost = min(cost, idle)
        out.append((max(cost, 1e-6) + 1e-3, f"{s['host_syncs_in_steps']} host syncs {scope} "
                    f"({s['host_syncs_per_step']:g} per step){waited}{busy}: " + "; ".join(parts)))
    if len(pageable):
        cost = min(1.0, float(pageable["cpu_blocked_ns"].sum()) / window_ns) if window_ns else 0.0
        mb = s["pageable_h2d_bytes"] / 1e6
        if s["pageable_h2d_copies"]:
            text = (f"{s['pageable_h2d_copies']} pageable host-to-device copies {scope} "
                    f"({s['pageable_h2d_per_step']:g} per step, {mb / steps:.2f} MB per step) held the CPU for "
                    f"{cost:.0%} of step time; pin the batch (pin_memory=True) and copy with non_blocking=True")
            if len(pageable) != s["pageable_h2d_copies"]:
                text += f"; {len(pageable) - s['pageable_h2d_copies']} more copies write pageable memory"
            if s["non_blocking_pageable_copies"]:
                text += (f"; {s['non_blocking_pageable_copies']} of them asked for non_blocking=True, which pageable "
                         "memory cannot give")
        else:  # only reads back into pageable memory (.cpu(), .tolist(), .item()): there is no batch to pin
            text = (f"{len(pageable)} device-to-host copies {scope} wrote pageable memory (.item(), .cpu(), "
                    f".tolist()), holding the CPU {cost:.0%} of step time")
        if gpu_bound:
            text, cost = text + busy, min(cost, idle)
        out.append((max(cost, 1e-6) + 1e-3, text))
    if s["gpu_idle_fraction"] is not None and s["gpu_idle_fraction"] >= 0.05:
        host = s["gpu_idle_host_wait_fraction"] or 0.0
        out.append((-1.0 + s["gpu_idle_fraction"], f"GPU idle {s['gpu_idle_fraction']:.0%} of step time "
                    f"({host:.0%} waiting for the host to launch work)"))
    if s["data_wait_fraction"] is not None and s["data_wait_fraction"] >= 0.01:
        text = f"waiting for data {s['data_wait_fraction']:.0%} of step time (the `data` ranges)"
        rank = s["data_wait_fraction"]
        idle = s.get("data_wait_gpu_idle_fraction")
        if idle is not None:
            # what a data wait costs is the GPU time it leaves unused; the part a sync left unused is the sync's
            after_sync = s.get("data_wait_after_sync_fraction") or 0.0
            text += f"; the GPU was idle through {idle:.0%} of it"
            if after_sync >= 0.5 * idle * s["data_wait_fraction"] and after_sync >= 0.01:
                text += (", each time right after a host sync had emptied its queue: without the syncs the GPU "
                         "runs the previous step's work meanwhile (fix the syncs first)")
            rank = max(idle * s["data_wait_fraction"] - after_sync, 0.0)
        out.append((rank, text))
    return out


def render_text(summary: dict, diff_rows=None, summary_diff=None) -> str:
    """The text report: header, findings (most costly first), then kernels and notes."""
    s = summary
    tool = "torch.profiler (Kineto)" if s["format"] == "kineto" else "Nsight Systems export"
    if s["steps_found"]:
        head = f"{s['source']}: {tool} trace, {s['steps']} steps ({_steps_text(s['step_numbers'])})"
        if s["step_ms_median"] is not None:
            head += f", median step {s['step_ms_median']:.2f} ms"
            if s.get("step_ms_mean") is not None:  # steps of uneven length: the mean says what the median hides
                head += f" (mean {s['step_ms_mean']:.2f} ms)"
    else:
        head = f"{s['source']}: {tool} trace, no steps found (counts are over the whole trace)"
    if s.get("logging_steps_excluded"):
        head += f", {len(s['logging_steps_excluded'])} logging steps left out"
    lines = [head]
    lines += [f"Warning: {w}" for w in s.get("warnings", [])]
    if summary_diff is not None:
        lines.append("Change from the baseline:")
        for r in summary_diff.itertuples(index=False):
            if np.isnan(r.before) and np.isnan(r.after):
                continue
            lines.append(f"  {r.label}: {_fmt(r.before)} -> {_fmt(r.after)}")
    if s["findings"]:
        lines += [f"  {i}. {text}" for i, text in enumerate(s["findings"], 1)]
    else:
        lines.append("  No host syncs, pageable copies, GPU idle time or data waits worth a mention.")
    if not s["host_syncs_in_steps"]:
        lines.append("  no host syncs" + (" inside steps" if s["steps_found"] else ""))
    if not s["pageable_h2d_copies"] and s["cuda"]:
        lines.append("  no pageable host-to-device copies" + (" inside steps" if s["steps_found"] else ""))
    if s["kernels_per_step"]:
        fams = ", ".join(f"{f['family']} {f['share']:.0%}" for f in s["kernel_families"] if f["share"])
        lines.append(f"Kernels: {s['kernels_per_step']:g} per step, {s['launches_per_step']:g} launches per step"
                     + (f"; GPU time: {fams}" if fams else ""))
        for k in s["top_kernels"][:3]:
            lines.append(f"  {k['share']:.0%} {k['name'][:100]} ({k['count']} calls)")
    if s.get("top_level_ops_per_step"):
        per_op = s.get("host_ms_per_op")
        lines.append(f"Ops: {s['top_level_ops_per_step']:g} top-level aten ops per step"
                     + (f", {per_op * 1000:.1f} us of host time each outside the data wait (median over steps)"
                        if per_op is not None else ""))
    if s.get("top_ops"):
        lines.append("Top CPU ops by self time (per step; `--json` also lists them by count):")
        lines.append(f"  {'self ms':>9} {'total ms':>9} {'calls':>7}  op")
        for op in s["top_ops"]:
            lines.append(f"  {op['self_ms_per_step']:9.3f} {op['total_ms_per_step']:9.3f} {op['count_per_step']:7g}  "
                         f"{op['name'][:90]}")
    if diff_rows is not None and len(diff_rows):
        lines.append("Calls and GPU work that changed (per step):")
        for r in diff_rows.head(12).itertuples(index=False):
            lines.append(f"  {r.status:<11} {r.kind:<8} {_fmt(r.before_per_step)} -> {_fmt(r.after_per_step)}  "
                         f"{str(r.name)[:90]}")
    lines += [f"Note: {n}" for n in s["notes"]]
    return "\n".join(lines)


def _fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return f"{value:.3g}"
