"""The workbook's rules on a trace of the learner's own job: chapter 08's decision tree, then every chapter's analysis,
ranked by what each costs the step.

    diagnosis = diagnose(trace, record, device)   # trace: checker.trace.TraceAnalysis; record: the launcher's dict
    diagnosis["wall"], diagnosis["findings"][0]["chapter"], ...

Every finding is a dict: ``chapter`` (the chapter that teaches the fix), ``title``, ``numbers`` (what decided it),
``lines`` (the user's ``path:line`` responsible, most first), ``fix``, ``cost`` (the share of the step it costs, on a
GPU measured; on a CPU an estimate, said in ``basis``) and ``confirmed`` (False for what a CPU can only suggest).
Thresholds come from the chapters' own chapter.toml (chapter 08's rules, chapter 03's data wait), not from here.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

import numpy as np

from checker.base.chapters import get_chapter
from checker.checks.triage import decide, measure
from checker.trace.analyses.counts import ELEMENTWISE_ATEN, aten_base_name, top_level_aten_ops
from checker.trace.analyses.stack import where_of

# syncs made by ops whose output size depends on the data (chapter 06): boolean indexing, nonzero, unique, ...
SHAPE_SYNC_OPS = ("aten::nonzero", "aten::index", "aten::_index_put_impl_", "aten::index_put_", "aten::masked_select",
                  "aten::repeat_interleave", "aten::_unique", "aten::_unique2", "aten::unique_dim",
                  "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::masked_scatter")
# On a CPU an op's host cost is its dispatch plus its math; the dispatch alone is a few microseconds (chapter 04's
# slow script measured 4.2 us per top-level op here, ops that do almost nothing): the share of a step that is
# dispatch is estimated as this over the mean time per op
CPU_DISPATCH_MS = 0.004
# on a CPU a host sync costs nothing measurable (there is no queue to drain): ranked as if it cost this share,
# above launch overhead estimates and below a measured data wait that decides the wall
CPU_SYNC_RANK = 0.5
# the kernel families that stream memory once per op (chapter 05's lesson)
ELEMENTWISE_FAMILIES = ("elementwise", "reduction")
# a finding below this share of the step is listed under "also seen", not ranked
MINOR = 0.02
# the most host time one kernel launch can cost on a GPU under doctor's tracer: chapter 04's slow script, launch-bound
# by design, spent 26 us per launch on an H200 (43.5 ms steps of 1652 launches,
# evidence/history/2026-11-28-h200-session46-doctor-verify.json); twice that
LAUNCH_HOST_MS = 0.05
WALL_NAMES = {"data": "data-bound", "overhead": "launch-bound", "kernel": "kernel-bound"}


def chapter_ref(number: str) -> dict:
    chapter = get_chapter(number)
    return {"id": chapter.id, "number": f"{chapter.number:02d}", "title": chapter.title}


def diagnose(trace, record: dict, device: str) -> dict:
    """The diagnosis of one recorded job (see the module's docstring)."""
    s = trace.summary()
    rules = dict(get_chapter("08").check("triage").threshold_for(device))
    m = measure(trace, device)
    wall, rule = decide(m, device, rules)
    on_gpu = device == "cuda" and s["cuda"]
    findings: list[dict] = []
    findings += _syncs(s, record, on_gpu)
    findings += _data(s, record, device, wall)
    if on_gpu:
        findings += _copies(trace, s, record)
        findings += _gpu_work(trace, s, m, wall, record.get("script_dir") or "")
    else:
        findings += _cpu_ops(trace, s, m, wall, record.get("script_dir") or "")
    findings += _optimizers(record, on_gpu)
    ranked, minor = _ranked(findings)
    chapters = [f["chapter"]["number"] for f in ranked]
    notes = _notes(trace, s, record, device, on_gpu)
    if len(set(chapters)) >= 3:
        ref = chapter_ref("07")
        notes.insert(0, f"walls from {len(set(chapters))} chapters at once: chapter {ref['number']} ({ref['title']}) "
                     "fixes them one lever at a time, measuring each")
    return {
        "device": device, "tool": record.get("tool"), "steps": s["steps"], "warmup": record.get("warmup"),
        "step_ms_median": s["step_ms_median"], "step_ms_mean": s["step_ms_mean"],
        "wall": wall, "wall_name": WALL_NAMES.get(wall, "not decided"), "rule": rule,
        "rules": rules, "measured": m, "decided_by": chapter_ref("08"),
        "findings": ranked, "also_seen": minor, "chapters": list(dict.fromkeys(chapters)),
        "notes": notes, "warnings": [w for w in s["warnings"] if not _own_cut(w, s["steps"], record)],
        "optimizers": record.get("optimizers", []), "loaders": record.get("loaders", []),
        "fetches_per_step": record.get("fetches_per_step", []),
    }


# ---- host syncs (chapters 01 and 06) --------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _functions(path: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, name) of every function of a Python file; empty when it cannot be read."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return ()
    return tuple((n.lineno, n.end_lineno or n.lineno, n.name) for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _locate(path: str, script_dir: str) -> str:
    """Where the user's file is: a trace names a file as Python knew it, often relative to the script's folder
    (sys.path[0]) rather than the working folder."""
    for folder in ("", script_dir):
        candidate = os.path.join(folder, path)
        if os.path.isfile(candidate):
            return candidate
    return path


def function_span(where: str | None, script_dir: str = "") -> tuple[str, str, int, int] | None:
    """(path, innermost function name or '<module>', its first line, its last line) for a 'path:line' (a relative
    path is looked for in the working folder, then in ``script_dir``)."""
    if not where or ":" not in where:
        return None
    path, _, line = where.rpartition(":")
    if not line.isdigit():
        return None
    path = _locate(path, script_dir)
    holding = [(hi - lo, name, lo, hi) for lo, hi, name in _functions(path) if lo <= int(line) <= hi]
    if not holding:
        return path, "<module>", 0, 0
    _size, name, lo, hi = min(holding)
    return path, name, lo, hi


def enclosing_function(where: str | None, script_dir: str = "") -> tuple[str, str] | None:
    """('path', innermost function name or '<module>') for a 'path:line'."""
    span = function_span(where, script_dir)
    return (os.path.realpath(span[0]), span[1]) if span else None


def _in_function(where: str | None, script_dir: str) -> str:
    """' in compute_loss (lines 31-35)': a sync an operator makes (`x[mask]`) is given the line of the last call
    before it, so its function's lines are said too."""
    span = function_span(where, script_dir)
    if not span or span[1] == "<module>":
        return ""
    return f" in {span[1]} ({span[0]}:{span[2]}-{span[3]})"


def _same_line(where: str | None, other: str | None, script_dir: str) -> bool:
    """Two 'path:line's name the same line of the same file (one may be relative, the other not)."""
    if not where or not other:
        return False
    (path, _, line), (path2, _, line2) = where.rpartition(":"), other.rpartition(":")
    return line == line2 and os.path.realpath(_locate(path, script_dir)) == os.path.realpath(_locate(path2, script_dir))


def _syncs(s: dict, record: dict, on_gpu: bool) -> list[dict]:
    if not s["host_syncs_in_steps"]:
        return []
    script_dir = record.get("script_dir") or ""
    loop = enclosing_function(record.get("anchor_where"), script_dir)
    # a sync whose innermost line of the user's is the optimizer's step() call was made inside torch.optim's own
    # code (LBFGS's line search reads the loss and the gradients' norms): chapter 01's, with a fix of its own
    stepping = record.get("anchor_where") if record.get("optimizers") and record.get("step_at") != "backward" else None
    groups: dict[str, list[dict]] = {"01": [], "06": [], "optimizer": []}
    for src in s["sync_sources"]:
        shape = src["op"] in SHAPE_SYNC_OPS or src["name"] in SHAPE_SYNC_OPS
        hidden = loop is not None and src["where"] is not None and enclosing_function(src["where"], script_dir) != loop
        if stepping is not None and _same_line(src["where"], stepping, script_dir) and not shape:
            groups["optimizer"].append(src)
            continue
        groups["06" if shape or hidden else "01"].append(src)
    steps = max(s["steps"], 1)
    total = sum(src["count"] for src in s["sync_sources"]) or 1
    out = []
    for group, sources in groups.items():
        if not sources:
            continue
        number = "06" if group == "06" else "01"
        count = sum(src["count"] for src in sources)
        share = count / total
        if on_gpu:
            # the host's wait in them, and the GPU idle that began in them (the queue ran dry until the host, back
            # from the sync, launched again), data waits included
            drained = s.get("gpu_idle_after_sync_fraction")
            if drained is None:
                drained = s["data_wait_after_sync_fraction"] or 0
            cost = ((s["host_sync_ms_per_step"] or 0) / (s["step_ms_mean"] or 1) + drained) * share
            basis = "measured: the time the host waited in these syncs, and the GPU idle they caused"
        else:
            cost = CPU_SYNC_RANK * (0.5 + 0.5 * share)
            basis = "estimated: on a CPU a sync waits for nothing; on a GPU each one empties the queue"
        lines = [f"{src['where'] or '(no line of yours: a library or a frame the trace lacks)'}: "
                 f"{src['count'] / steps:g} per step ({src['op'] or src['name']}){_in_function(src['where'], script_dir)}"
                 for src in sources[:5]]
        every = [src for src in sources if src["count"] >= steps]
        some = "" if every else " (not every step: a logging interval may be fine, chapter 01 allows one read per interval)"
        if group == "optimizer":
            title = (f"{count / steps:g} host syncs per step inside the optimizer's step() ({record.get('anchor')}: "
                     f"torch.optim's own code reads values){some}")
            fix = ("an optimizer whose method reads values on the host (LBFGS's line search) syncs by design: choose "
                   "one that does not (SGD, Adam, AdamW), or keep it and count its syncs as the price of its method")
        elif number == "01":
            title = f"{count / steps:g} host syncs per step reading values in the loop{some}"
            fix = ("keep the value on the device (`total += loss.detach()`), read it once per logging interval; "
                   "`if t:`/`float(t)`/`.item()`/`.cpu()` each wait for the GPU to finish everything queued")
        else:
            title = f"{count / steps:g} hidden host syncs per step (data-dependent shapes or reads inside helpers){some}"
            fix = ("give the op a fixed shape: multiply by a mask or `torch.where` instead of `x[mask]`, pass "
                   "`output_size=` to repeat_interleave, keep reads in helpers on the device")
        out.append(_finding(number, "host_syncs", title, cost, basis,
                            {"host_syncs_per_step": round(count / steps, 3),
                             "host_sync_ms_per_step": s["host_sync_ms_per_step"] if on_gpu else None},
                            lines, fix, confirmed=True))
    return out


# ---- data (chapter 03; chapter 02's pinning) --------------------------------------------------------------
def _data(s: dict, record: dict, device: str, wall: str | None) -> list[dict]:
    wait = s["data_wait_fraction"]
    if wait is None:
        return []
    cut = float(get_chapter("03").check("data_wait").threshold_for(device))
    if wait < cut and wall != "data":
        return []
    loaders = record.get("loaders", [])
    lines = [f"{l['where'] or '(a DataLoader built in a library)'}: DataLoader(num_workers={l['num_workers']}, "
             f"pin_memory={l['pin_memory']}, persistent_workers={l['persistent_workers']}, "
             f"batch_size={l['batch_size']}) of {l['dataset']}" for l in loaders]
    idle = s["data_wait_gpu_idle_fraction"]
    numbers = {"data_wait_fraction": wait, "threshold": cut}
    cost = wait
    if idle is not None:
        numbers["gpu_idle_through_wait"] = idle
        cost = wait * idle
    fetches = record.get("fetches_per_step") or []
    if fetches and max(fetches) > 1:
        numbers["batches_per_step"] = round(float(np.mean(fetches)), 2)
    workers = [l["num_workers"] for l in loaders if isinstance(l.get("num_workers"), int)]
    fix = ("prepare batches in worker processes: DataLoader(num_workers=4 or more, persistent_workers=True, "
           "pin_memory=True on a GPU)" if not workers or min(workers) == 0 else
           "more workers, or less work per sample in the dataset's __getitem__ (decode once, cache, move "
           "augmentation to the GPU)")
    title = f"waits for its batches {wait:.0%} of each step" + (f", the GPU idle through {idle:.0%} of the wait"
                                                                  if idle is not None else "")
    return [_finding("03", "data_wait", title, cost + (1.0 if wall == "data" else 0.0),
                     "measured: the `data` ranges around each DataLoader fetch", numbers, lines, fix, confirmed=True)]


# ---- pageable copies (chapter 02) ------------------------------------------------------------------------
def _copies(trace, s: dict, record: dict) -> list[dict]:
    if not s["pageable_h2d_copies"]:
        return []
    copies = trace.get_copies() if hasattr(trace, "get_copies") else None
    lines = []
    if copies is not None and len(copies) and "where" in copies:
        pageable = copies[copies["pageable"] & (copies["copy_kind"] == "HtoD")]
        for where, count in pageable["where"].fillna("(no line of yours)").value_counts().head(5).items():
            lines.append(f"{where}: {count / max(s['steps'], 1):g} per step")
    lines += [f"{l['where']}: DataLoader(pin_memory={l['pin_memory']})" for l in record.get("loaders", [])
              if not l.get("pin_memory")]
    cost = (s["pageable_copy_cpu_ms_per_step"] or 0) / (s["step_ms_mean"] or 1)
    title = (f"{s['pageable_h2d_per_step']:g} pageable host-to-device copies per step "
             f"({s['pageable_h2d_bytes'] / max(s['steps'], 1) / 1e6:.2f} MB), each holding the CPU")
    return [_finding("02", "pageable_copies", title, cost, "measured: the CPU time each copy held",
                     {"pageable_h2d_per_step": s["pageable_h2d_per_step"],
                      "pageable_copy_cpu_ms_per_step": s["pageable_copy_cpu_ms_per_step"]}, lines,
                     "pin the batches (DataLoader(pin_memory=True)) and copy with `.to(device, non_blocking=True)`",
                     confirmed=True)]


# ---- launches and kernels on a GPU (chapters 04, 05, 07) --------------------------------------------------
def _gpu_work(trace, s: dict, m: dict, wall: str | None, script_dir: str) -> list[dict]:
    out = []
    idle = s["gpu_idle_fraction"]
    if idle is None:
        return out
    families = {f["family"]: f["share"] or 0 for f in s["kernel_families"]}
    elementwise = sum(families.get(f, 0) for f in ELEMENTWISE_FAMILIES)
    explained = 0.0  # the idle share syncs, copies and data waits already account for
    explained += (s["host_sync_ms_per_step"] or 0) / (s["step_ms_mean"] or 1)
    explained += (s["pageable_copy_cpu_ms_per_step"] or 0) / (s["step_ms_mean"] or 1)
    explained += (s["data_wait_fraction"] or 0) * (s["data_wait_gpu_idle_fraction"] or 0)
    # the GPU idle that began in a host sync is the sync's (counted there); its data-wait part is counted above
    explained += max(0.0, (s.get("gpu_idle_after_sync_fraction") or 0) - (s["data_wait_after_sync_fraction"] or 0))
    unexplained = max(0.0, idle - explained)
    # what the launches can account for: each costs the host at most LAUNCH_HOST_MS; the idle beyond is the host busy
    # between few launches (Python: the loop's, a library's, the tracer's own), which fewer launches cannot shorten
    launch_cost = min(unexplained, (s["launches_per_step"] or 0) * LAUNCH_HOST_MS / (s["step_ms_mean"] or 1))
    if launch_cost >= 0.1:
        out.append(_finding(
            "04", "launches", f"launch-bound: the GPU idles {idle:.0%} of the step between "
            f"{s['launches_per_step']:g} kernel launches per step", launch_cost,
            "measured: GPU idle time the host's syncs, copies and data waits do not explain",
            {"gpu_idle_fraction": idle, "launches_per_step": s["launches_per_step"],
             "kernels_per_step": s["kernels_per_step"]}, _busiest_lines(trace, s, script_dir),
            "fewer, larger launches: torch.compile the model, a foreach or fused optimizer, CUDA graphs "
            "(mode='reduce-overhead')", confirmed=True))
    busy = 1.0 - idle
    top = s["top_kernels"][0] if s["top_kernels"] else None
    if elementwise >= 0.3 and busy * elementwise >= MINOR:
        hottest = [f"{k['name'][:90]}: {k['share']:.0%} of GPU time" for k in s["top_kernels"][:5]
                   if k["family"] in ELEMENTWISE_FAMILIES][:3]
        out.append(_finding(
            "05", "elementwise", f"elementwise chains: {elementwise:.0%} of GPU time in elementwise and reduction "
            "kernels, each a pass over memory", busy * elementwise,
            "measured: the GPU time of elementwise and reduction kernels", {"elementwise_share_of_gpu_time":
                                                                             round(elementwise, 4)},
            hottest, "fuse the chain: torch.compile the function (one kernel per chain), or a fused op "
            "(F.gelu, F.layer_norm, fused optimizer)", confirmed=True))
    if wall == "kernel" and top is not None and top["family"] not in ELEMENTWISE_FAMILIES:
        out.append(_finding(
            "07", "kernels", f"kernel-bound: the GPU is busy {busy:.0%} of the step; its top kernel takes "
            f"{top['share']:.0%} of GPU time", busy * (top["share"] or 0),
            "measured: the top kernel's share of GPU time in a busy GPU",
            {"gpu_busy_fraction": round(busy, 4), "top_kernel_share": top["share"]},
            [f"{k['name'][:90]}: {k['share']:.0%} ({k['family']})" for k in s["top_kernels"][:3]],
            "cheaper kernels: bf16 autocast or TF32 matmuls (where the loss allows), channels_last for convolutions; "
            "`ncu` on the top kernel says whether it is at the GPU's limit (chapter 08's last step)", confirmed=True))
    return out


def _busiest_lines(trace, s: dict, script_dir: str, limit: int = 5) -> list[str]:
    """The user's lines that issue the most top-level ops per step (each one at least one launch on a GPU)."""
    ops = top_level_aten_ops(trace.events)
    if ops.empty or not trace.has_python_frames:
        return []
    ops = ops[ops["step"].notna()] if trace.has_steps else ops
    if len(ops) > 60_000:  # a very long step: a sample of the ops tells the same lines
        ops = ops.sample(60_000, random_state=0).sort_index()
    wheres = where_of(trace.events, trace.events.index.get_indexer(ops.index))
    # an operator (`a * b`) makes no call of its own, so a line is approximate: ops are counted per function,
    # with the function's lines, and its busiest line
    per_function: dict[str, dict[str, int]] = {}
    for where in wheres:
        span = function_span(where, script_dir)
        if span is None:
            key = "(no line of yours: library code)"
        elif span[1] == "<module>":
            key = f"{where} (module level)"
        else:
            key = f"{span[0]}:{span[2]}-{span[3]} ({span[1]})"
        lines = per_function.setdefault(key, {})
        lines[where or ""] = lines.get(where or "", 0) + 1
    steps = max(s["steps"], 1)
    scale = len(top_level_aten_ops(trace.events)) / max(len(ops), 1) if len(ops) == 60_000 else 1.0
    ranked = sorted(per_function.items(), key=lambda kv: -sum(kv[1].values()))[:limit]
    out = []
    for key, lines in ranked:
        busiest = max(lines, key=lines.get)
        tail = f", most from line {busiest.rpartition(':')[2]}" if busiest and "-" in key else ""
        out.append(f"{key}: {sum(lines.values()) * scale / steps:.0f} ops per step{tail}")
    return out


# ---- ops on a CPU (chapters 04 and 05, estimated) -------------------------------------------------------
def _cpu_ops(trace, s: dict, m: dict, wall: str | None, script_dir: str) -> list[dict]:
    out = []
    per_op = m.get("host_ms_per_op")
    ops = m.get("ops_per_step") or 0
    outside = 1.0 - (m.get("data_wait") or 0.0)
    if per_op:
        cost = outside * min(1.0, CPU_DISPATCH_MS / per_op)
        if wall == "overhead" or cost >= MINOR:
            out.append(_finding(
                "04", "launches", f"{ops:g} ops per step at {per_op * 1000:.1f} us each: on a GPU each is at least "
                "one kernel launch", cost, f"estimated: a CPU has no launches; dispatch (~{CPU_DISPATCH_MS * 1000:g} "
                "us an op) over the time per op", {"ops_per_step": ops, "host_ms_per_op": per_op},
                _busiest_lines(trace, s, script_dir),
                "fewer, larger ops: torch.compile, a foreach or fused optimizer, "
                "built-in fused layers (nn.LayerNorm, F.scaled_dot_product_attention)", confirmed=False))
    top = trace.get_top_ops(limit=None)
    if len(top):
        names = top["name"].astype(str)
        is_elem = names.map(lambda n: n.startswith("aten::") and aten_base_name(n) in ELEMENTWISE_ATEN).astype(bool)
        elem_ms = float(top.loc[is_elem, "self_ms_per_step"].sum())
        all_ms = float(top["self_ms_per_step"].sum()) or 1.0
        share = elem_ms / all_ms
        elem_per_step = float(top.loc[is_elem, "count_per_step"].sum())
        if share >= 0.3:
            hottest = top[is_elem].head(3)
            out.append(_finding(
                "05", "elementwise", f"elementwise chains: {share:.0%} of op time in {elem_per_step:g} elementwise "
                "ops per step, each a pass over memory", outside * share * 0.5,
                "estimated: elementwise ops' share of CPU op time (a GPU shows their memory traffic)",
                {"elementwise_ops_per_step": round(elem_per_step, 2), "elementwise_share_of_op_time": round(share, 4)},
                [f"{r.name}: {r.count_per_step:g} per step, {r.self_ms_per_step:.3f} ms" for r in
                 hottest.itertuples(index=False)], "fuse the chain: torch.compile the function, or fused ops",
                confirmed=False))
    return out


# ---- optimizers (chapter 04) ---------------------------------------------------------------------------
def _optimizers(record: dict, on_gpu: bool) -> list[dict]:
    out = []
    for opt in record.get("optimizers", []):
        if opt.get("foreach") is False and not opt.get("fused") and (opt.get("params") or 0) >= 8:
            out.append(_finding(
                "04", "optimizer_loop", f"{opt['class']} updates its {opt['params']} parameters one at a time "
                "(foreach=False): several launches per parameter per step", 0.05 if on_gpu else 0.03,
                "setting: read from the optimizer", {"params": opt["params"], "foreach": False},
                [f"{opt['where']}: {opt['class']}.step()"], "drop foreach=False (the default is foreach on a GPU), "
                "or fused=True", confirmed=on_gpu))
    return out


def _notes(trace, s: dict, record: dict, device: str, on_gpu: bool) -> list[str]:
    notes = []
    opts = record.get("optimizers", [])
    if len(opts) > 1:
        notes.append(f"{len(opts)} optimizers step ({', '.join(o['class'] + ' at ' + str(o['where']) for o in opts)}):"
                     f" a step ends at each step of {record.get('anchor')} ({record.get('anchor_where')}), the one "
                     "that steps least often")
    fetches = record.get("fetches_per_step") or []
    if fetches and max(fetches) > 1:
        notes.append(f"{np.mean(fetches):g} DataLoader batches per optimizer step (gradient accumulation): every "
                     "number is per optimizer step")
    if s["data_wait_fraction"] is None or not record.get("loaders"):
        notes.append("no DataLoader fetch was seen: batches come from elsewhere (a generator, tensors in memory), so "
                     "the time spent making them cannot be told apart from the step")
    if record.get("compiled_in_window"):
        notes.append("torch.compile compiled during the recorded steps: give --warmup more steps so that only "
                     "steady-state steps are recorded")
    elif record.get("compiled"):
        notes.append("torch.compile is in use: the ops and lines inside compiled regions are its generated code")
    if not on_gpu:
        notes.append("a CPU cannot show: GPU idle time, kernels, pageable copies, nor the syncs `.cpu()`, "
                     "`.tolist()` and `.numpy()` make; launch and elementwise costs above are estimates. Run with "
                     "--device cuda on a GPU to measure them")
        unpinned = [l for l in record.get("loaders", []) if not l.get("pin_memory")]
        if unpinned:
            notes.append("on a GPU, batches from " + ", ".join(f"the DataLoader at {l['where']}" for l in unpinned)
                         + " (pin_memory=False) would be pageable copies: chapter 02")
    if on_gpu and s["gpu_idle_fraction"] and s["gpu_idle_fraction"] >= 0.5 and s["launches_per_step"] is not None \
            and s["launches_per_step"] * LAUNCH_HOST_MS < 0.25 * (s["step_ms_mean"] or 0):
        notes.append(f"the GPU idles {s['gpu_idle_fraction']:.0%} of the step, yet its {s['launches_per_step']:g} "
                     "launches per step account for little of it: the host is busy with Python between them (the "
                     "loop's, a library's, and doctor's own tracer, which slows every Python call), not launching; "
                     "time the job without doctor before fixing what may be the tracer's")
    if record.get("tool") == "nsys":
        notes.append("Nsight Systems records no Python lines: run --tool torch for the lines of your script")
    return notes


def _own_cut(warning: str, steps: int, record: dict) -> bool:
    """The engine's warning for ranges cut at a step's end, where the cut ranges are the optimizers' own
    ``Optimizer.step#`` ranges: each recorded step ends inside one (the launcher's hook runs in it), so up to one
    per optimizer step is expected, not damage."""
    if "end after the step they started in" not in warning:
        return False
    count = warning.split(" ", 1)[0].replace(",", "")
    per_step = sum(o.get("steps", 0) for o in record.get("optimizers", [])) / max(record.get("steps_done") or 1, 1)
    return count.isdigit() and int(count) <= steps * max(1, round(per_step))


def _finding(number: str, key: str, title: str, cost: float, basis: str, numbers: dict, lines: list[str],
             fix: str, confirmed: bool) -> dict:
    return {"key": key, "chapter": chapter_ref(number), "title": title, "cost": round(float(cost), 4),
            "basis": basis, "numbers": numbers, "lines": lines, "fix": fix, "confirmed": confirmed}


# ---- a torchrun job's ranks (chapter 09) -----------------------------------------------------------------
def add_ranks(d: dict, traces: list) -> None:
    """A job of several ranks: chapter 09's analyses of every rank's recorded steps side by side (``d["ranks"]``),
    and as findings the straggler (a rank that does more per step while another waits for it in the all-reduces)
    and the all-reduce rounds beyond one per optimizer step (accumulation without ``no_sync()``)."""
    from checker.trace.ranks import ranks_summary

    summary = ranks_summary(traces)
    d["ranks"] = summary
    found = []
    share = summary["worst_wait_share"] or 0.0
    if summary["straggler"] is not None:
        found.append(_finding(
            "09", "straggler", f"rank {summary['straggler']} does more per step, and rank {summary['waiting_rank']} "
            f"waits for it {share:.0%} of its step inside the all-reduces", share,
            "measured: each all-reduce's time beyond the same all-reduce's shortest on any rank",
            {"worst_wait_share": share, "late_rank_did_more": summary["late_rank_did_more"]}, [],
            "give every rank the same work per step: log, compute metrics and evaluate on rank 0 only at logging "
            "intervals (the other ranks wait for it in the next all-reduce)", confirmed=True))
    first = summary["ranks"][0]
    rounds, step_ms = first["allreduce_rounds"] or 0, first["step_ms"]
    if rounds > 1 and step_ms:
        extra = (first["allreduce_ms"] or 0) / step_ms * (1 - 1 / rounds)
        found.append(_finding(
            "09", "allreduce_rounds", f"{rounds:g} rounds of all-reduces per optimizer step: the gradients are summed "
            "across ranks after every micro-batch", extra, "measured: rank 0's all-reduce time beyond one round",
            {"allreduce_rounds": rounds, "rounds_by_grouping": first["rounds_by_grouping"],
             "rounds_by_volume": first["rounds_by_volume"], "elements_per_step": first["elements_per_step"],
             "allreduce_ms_per_step": first["allreduce_ms"]}, [],
            "wrap every micro-batch's forward and backward but the last in `model.no_sync()`", confirmed=True))
    d["findings"], minor = _ranked(d["findings"] + found)
    d["also_seen"] += minor
    d["chapters"] = list(dict.fromkeys(f["chapter"]["number"] for f in d["findings"]))


def _ranked(findings: list[dict]) -> tuple[list[dict], list[dict]]:
    """The findings that cost at least MINOR of the step, most costly first, and the rest (``also_seen``)."""
    findings = sorted(findings, key=lambda f: -f["cost"])
    return [f for f in findings if f["cost"] >= MINOR], [f for f in findings if f["cost"] < MINOR]
