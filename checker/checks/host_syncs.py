"""host_syncs: no host-device synchronization inside training steps, logging steps excepted.

Counted in the candidate's own trace (torch.profiler or nsys) by checker.trace: on CUDA the
cudaStreamSynchronize / cudaDeviceSynchronize / cudaEventSynchronize calls, synchronous copies and frees that wait
for the device (cudaFree: torch.cuda.empty_cache()); on a CPU
trace the aten ops that would sync on a GPU. Every sync from the first traced step to the last counts, those made
between two step ranges too; on a CPU, the reads torch.optim's own code makes of CPU scalars are excused by count,
up to what the slow script's own optimizer makes per step in its trace of the same pair. Each is traced back to its line in the script when the trace
holds Python frames.
"""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import numpy as np
import pandas as pd

from checker.checks import BASELINE_TRACE_CPU, FAILED, PASSED, TRACE, check, result
from checker.checks.batch_copies import device_moves, moves_by_step
from checker.checks.evidence import own_native_code, rank_traces
from checker.base.paths import display_path


def as_graded(where, run, script: Path) -> str | None:
    """A trace's 'path:line' with the run's private copy of the script named as the learner knows it."""
    copy = getattr(run, "copy", None)
    if not isinstance(where, str) or copy is None:
        return where if isinstance(where, str) else None
    return where.replace(str(copy), display_path(script))


def source_line(where: str | None, script: Path | None = None) -> str:
    """'path:line' -> "path:line `code`" when the file is readable.

    Traces record paths as Python knew them, often relative ('train.py'); those are looked up beside the
    graded script.
    """
    if not where or ":" not in where:
        return where or "(no Python frame in the trace)"
    path, _, line = where.rpartition(":")
    if not line.isdigit():
        return where
    candidates = [Path(path)]
    if script is not None and not Path(path).is_absolute():
        candidates.insert(0, script.parent / Path(path).name if Path(path).name == script.name else script.parent / path)
    for candidate in candidates:
        code = linecache.getline(str(candidate), int(line)).strip()
        if code:
            return f"{where} `{code}`"
    return where


def optimizer_reads_allowed(evidence) -> tuple[int, str]:
    """How many reads of CPU scalars by torch.optim's own code a step may make uncounted (a CPU trace only), and
    where that number comes from: the most the slow script's own optimizer made in any of its traced steps, counted
    in its trace of the same pair (0 without one; in class grading the reference solution's, which steps the slow
    script's optimizer). A read that looks like the optimizer's (inside torch.optim's
    frames, a fused optimizer op, an optimizer's step range) is excused only up to that count: a script that routes
    its loss through an optimizer's own reading code makes one read more than the slow script's optimizer does."""
    found = evidence.traces.get("baseline")
    if found is None or isinstance(found, Exception):
        return 0, "no trace of the slow script"
    base_steps = found.get_steps()
    log_steps = {int(s) for s in base_steps["step"] if evidence.is_log_step(int(s))}
    reads = found.get_window_syncs(exclude_steps=log_steps)
    reads = reads[reads["optimizer_read"]]
    most = int(reads.groupby("step").size().max()) if len(reads) else 0
    return most, "the slow script's own optimizer, counted in its trace"


@check("host_syncs", needs=(TRACE, BASELINE_TRACE_CPU), key="host_syncs_per_step", fmt="{:g} syncs/step")
def host_syncs(evidence, spec):
    """no host-device syncs inside training steps (logging steps excepted)"""
    threshold = float(spec.threshold_for(evidence.device))
    # a job of several ranks (chapter 09): every rank's steps are judged, and the rank that read most is reported
    allowed = optimizer_reads_allowed(evidence) if evidence.device == "cpu" else (0, "")
    judged = [_rank_syncs(evidence, spec, threshold, allowed, trace, rank)
              for rank, trace in enumerate(rank_traces(evidence))]
    worst = max(judged, key=lambda outcome: (outcome.status == FAILED, outcome.measured.get("host_syncs_per_step", 0)))
    return worst


def _rank_run(evidence, rank: int):
    """The rank's traced run (the job's only one outside chapter 09), or None (a trace judged alone has none)."""
    run = getattr(evidence, "candidate_run", None)
    ranks = getattr(run, "ranks", None)
    if ranks:
        run = ranks[rank] if rank < len(ranks) else None
    return run


def _tensor_views(evidence, rank: int) -> tuple[int | None, bool]:
    """The numpy arrays over a tensor's memory the rank's traced run held after its window (a CPU run; None when it
    sent no count), and whether there was a run (a trace judged alone has none)."""
    run = _rank_run(evidence, rank)
    return getattr(run, "tensor_views", None), run is not None


def _own_processes(run) -> int:
    """How many processes under the run, at its first step or when its window closed, were more than the workers of
    the DataLoader it stepped through (its settings as the harness reported them; torch.compile's pool and
    multiprocessing's own helpers left out): a process of the script's own (red team 51's relay_pool_01)."""
    if run is None:
        return 0
    helpers = set(getattr(run, "multiprocessing_helpers", ()) or ())
    seen = max(len(set(run.workers_at_first_step) - helpers), len(set(run.workers_at_close) - helpers))
    loader = (getattr(run, "raw", None) or {}).get("loader") or {}
    workers = loader.get("num_workers") if isinstance(loader, dict) else 0
    workers = workers if isinstance(workers, int) and not isinstance(workers, bool) and workers > 0 else 0
    return max(0, seen - workers)


def _rank_syncs(evidence, spec, threshold: float, excused: tuple[int, str], trace, rank: int):
    """The verdict on one rank's trace (rank 0: the job's only process, outside chapter 09). ``excused``: the
    optimizer's reads per step the slow script makes itself, and where that count comes from."""
    steps = trace.get_steps()
    log_steps = {int(s) for s in steps["step"] if evidence.is_log_step(int(s))}
    counted = [int(s) for s in steps["step"] if int(s) not in log_steps]
    if not counted:
        return result(spec, FAILED, threshold=threshold, evidence=["the trace holds no training steps outside logging steps"])
    # every sync from the first traced step to the last counts, between step ranges too: the ranges are pushed in the
    # run's own process and can be moved; only a logging step's own range is excused
    found = trace.get_window_syncs(exclude_steps=log_steps)
    allowed, allowed_from = excused
    reads = found[found["optimizer_read"]]
    # the optimizer's reads beyond the slow script's own count, per step: the first `allowed` of each step are excused
    nth = reads.groupby("step").cumcount()
    syncs = pd.concat([found[~found["optimizer_read"]], reads[nth.to_numpy() >= allowed]]).sort_values("start_ns")
    per_step = len(syncs) / len(counted)
    measured = {
        "host_syncs_per_step": round(per_step, 3),
        "host_syncs": int(len(syncs)),
        "between_steps": int(syncs["between"].sum()),
        "steps": len(counted),
        "logging_steps_excluded": sorted(log_steps),
        "trace_tool": evidence.trace_tool,
    }
    if evidence.device == "cpu":
        measured["optimizer_reads_excused_per_step"] = allowed
    lines = []
    # torch.profiler before 2.12 records no call sites: a frame's line there is where it stood, not the call
    lines_recorded = trace.has_call_lines
    if len(syncs):
        grouped = syncs.groupby(["name", "where", "in_fetch", "between", "optimizer_read"], dropna=False).size()
        for (name, where, fetching, between, optimizer_read), count in grouped.sort_values(ascending=False).items():
            where = as_graded(where, evidence.candidate_run, evidence.candidate)
            if where and not lines_recorded:
                origin = f"{where.rpartition(':')[0]} (this torch.profiler records no call lines; torch >= 2.12 does)"
            else:
                origin = source_line(where, evidence.candidate)
            how = ""
            if between:
                how = " (between two step ranges: a sync in the window counts wherever the ranges were put)"
            elif optimizer_read:
                how = (f" (inside an optimizer's reading code, beyond the {allowed} per step that {allowed_from} "
                       "makes)")
            if fetching:  # the harness's `data` range: no line of the loop's body made it
                lines.append(f"{count / len(counted):g} per step: {name} while session.steps() fetched the next "
                             "batch, made by the DataLoader, its sampler or dataset (a DataLoader whose workers do "
                             f"not outlive an epoch starts anew each epoch), iterated at {origin}{how}")
            else:
                lines.append(f"{count / len(counted):g} per step: {name} from {origin}{how}")
    views, ran = _tensor_views(evidence, rank)
    if views is not None:
        measured["numpy_views_of_tensors"] = views
        if views:
            lines.append(f"{views} Python object(s) sharing memory with a tensor: numpy views or DLPack exports of a "
                         "tensor, or tensors made over a Python buffer (a numpy array, bytearray, file: as_tensor, "
                         "from_numpy, frombuffer, from_dlpack), written in the window or held after it, or a tensor "
                         "exported (.numpy(), DLPack) or its values handed to a Python callable (apply_, map_) in "
                         "the window on another thread than the steps', or the process's memory or its accounting "
                         "opened as a file (/proc/<pid>/mem, /proc/<pid>/stat), or storages mapped over a file, built "
                         "over an address or moved to shared memory (from_file, share_memory_), or ctypes "
                         "objects made over raw memory in the window (from_address, from_buffer, string_at): on a CPU "
                         "a value copied into such memory and read from the other side makes no op a trace records, "
                         "so the reads are not counted; read values with .item() or .tolist(), in logging steps")
    elif evidence.device == "cpu" and ran:
        lines.append("the run sent no count of the numpy arrays over its tensors' memory: its reads cannot be counted")
    extra = _own_processes(_rank_run(evidence, rank)) if evidence.device == "cpu" else 0
    if extra:
        measured["processes_of_its_own"] = extra
        lines.append(f"{extra} process(es) beside the training process that are not its DataLoader's workers ran "
                     "with its window: a value written into memory shared with one is read there with no op a trace "
                     "records, so the reads cannot be counted; read values with .item() or .tolist(), in logging "
                     "steps")
    native = tuple(getattr(_rank_run(evidence, rank), "native_code", ()) or ())  # a CPU run's shared objects of its own
    if native:
        measured["native_code_of_its_own"] = len(native)
        lines.append(f"{own_native_code(native)} reads a tensor's memory on a CPU "
                     "with no op or call a trace records, so the reads cannot be counted; read values with .item() "
                     "or .tolist(), in logging steps, or check on a GPU")
    errors, caught = getattr(_rank_run(evidence, rank), "op_errors", None) or (0, ())
    if errors:
        measured["op_errors_caught"] = errors
        lines.append(f"{errors} error(s) raised by ops in the window's steps and caught, or warnings shown "
                     f"({', '.join(caught[:3])}): on a CPU an op that checks a value as it runs (an index within its "
                     "bounds) and fails or warns tells Python something of that value, a read no op records; read "
                     "values with .item() or .tolist(), in logging steps")
    copied = _copies_beyond_baseline(evidence, trace, rank, counted, measured) if evidence.device == "cpu" else None
    if copied:
        lines.append(copied)
    varied = _shapes_from_values(evidence, spec, trace, counted, measured)
    if varied:
        lines.append(varied)
    compiled = _compiled_steps(evidence, spec, trace, counted, measured)
    if compiled:
        lines.append(compiled)
    if rank:
        measured["rank"] = rank
        lines = [f"rank {rank}: {line}" for line in lines]
    status = PASSED if per_step <= threshold else FAILED
    if evidence.device == "cpu" and ran and (views != 0 or native or errors or extra):  # reads no op records, or no count sent
        status = FAILED
    if varied or compiled or copied:  # steps that could not have read nothing, or cannot be judged
        status = FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)


def _device_copies(trace, steps: list[int], batch_size: int) -> dict[int, int]:
    """Per step of ``steps``: the copies it asked for that may change a tensor's device (``.to(device)``, ``.cpu()``,
    ``copy_``; batch_copies.device_moves)."""
    per_step = device_moves(moves_by_step(trace), batch_size).groupby("step").size()
    return {step: int(per_step.get(step, 0)) for step in steps}


def _copies_beyond_baseline(evidence, trace, rank: int, counted: list[int], measured: dict) -> str | None:
    """On a CPU, why the rank's steps copied more tensors than the slow script's same rank does (its batch's copies
    to the device), or None. A CPU has one memory: a step's value copied to the host (``.cpu()``,
    ``host.copy_(value, non_blocking=True)``), which on a GPU waits for the queue every step, is a copy like the
    batch's, and no read op follows it where the host sums it up (red team 70's d2h_queued_01/06/07/09). What the
    slow script copies per step is the batch; every copy beyond it, of any shape, counts."""
    base = evidence.traces.get("baseline" if not rank else f"baseline.rank{rank}")
    if base is None or isinstance(base, Exception):
        return None
    batch_size = int(evidence.cfg.get("batch_size") or evidence.cfg.get("global_batch") or 0)
    base_steps = [int(s) for s in base.get_steps()["step"] if not evidence.is_log_step(int(s))]
    if not base_steps:
        return None
    theirs = sorted(_device_copies(base, base_steps, batch_size).values())
    expected = theirs[len(theirs) // 2]
    mine = _device_copies(trace, counted, batch_size)
    beyond = {step: n - expected for step, n in mine.items() if n > expected}
    measured["copies_beyond_baseline"] = sum(beyond.values())
    if not beyond:
        return None
    first = ", ".join(f"step {step} ({n})" for step, n in sorted(beyond.items())[:5])
    return (f"{sum(beyond.values())} copies in {len(beyond)} of {len(counted)} steps beyond the {expected} per step the "
            f"slow script's steps ask for (its batch's copies to the device): {first}. On a GPU a step's value copied to "
            "the host (.cpu(), .to('cpu'), a host tensor's copy_, non_blocking or not) waits for the queue every "
            "step; keep values on the device and read them in logging steps")


# what a compiled region leaves in a trace: Dynamo's range around a compiled frame, the compiled graph's call, and
# AOTAutograd's function in backward
COMPILED_REGION = re.compile(r"^(?:Torch-Compiled Region|## Call CompiledFxGraph|CompiledFunction(?:Backward)?$)")


def _compiled_steps(evidence, spec, trace, counted: list[int], measured: dict) -> str | None:
    """Where a chapter gives ``no_compiled_steps`` (its lesson needs no compiler): on a CPU, why steps that ran a
    compiled region cannot be judged, or None. Inductor's CPU kernels and buffers record no op: a value read or a
    shape sized inside them is in no count (red team 55's compiled_sizes_06 padded by the data in one)."""
    if not spec.options.get("no_compiled_steps") or evidence.device != "cpu":
        return None
    events = trace.events
    judged = events["step"].isin(counted).to_numpy() if "step" in events else np.zeros(len(events), bool)
    hit = events[judged & events["name"].astype(str).str.match(COMPILED_REGION).to_numpy(bool)]
    steps = sorted({int(s) for s in hit["step"]})
    measured["steps_with_compiled_regions"] = len(steps)
    if not steps:
        return None
    return (f"{len(steps)} traced step(s) ran a compiled region (torch.compile; the first in step {steps[0]}): on a "
            "CPU its kernels read values and size tensors with no op a trace records, so its reads and shapes cannot "
            "be judged. This chapter's lesson needs no compiler: leave torch.compile out, or check on a GPU, where "
            "every read is a sync the trace shows")


def _shapes_from_values(evidence, spec, trace, counted: list[int], measured: dict) -> str | None:
    """Where a chapter gives ``static_steps`` (its lesson is shapes that do not follow the data): on a CPU, why the
    traced steps outside logging steps recorded different amounts of input, or None. Its batches are all alike, so a
    step that reads no value cannot size a tensor or pick a branch by the data, and every such step records the same
    input elements (the solution's, exactly); the slow script's pads follow each batch's values. A value can reach
    Python without an op that reads it (how long an op on subnormal floats took: red team 53's denorm06), but to
    matter it must change a shape or a branch, which shows here whatever the road."""
    if not spec.options.get("static_steps") or evidence.device != "cpu":
        return None
    from checker.trace.analyses.collectives import input_elements_by_step, input_shapes_by_step

    elements = input_elements_by_step(trace)
    if elements is None:
        return None
    shapes = input_shapes_by_step(trace)
    judged = set(counted)
    per_step = {int(step): int(round(float(n) * 1e6)) for step, n in elements.items() if int(step) in judged}
    # what each step ran: its ops' input shapes where recorded (a total can agree where the shapes differ)
    signature = {step: (n, int(shapes.get(step, 0)) if shapes is not None else 0) for step, n in per_step.items()}
    kinds = sorted(set(signature.values()))
    measured["distinct_step_inputs"] = len(kinds)
    if len(kinds) <= 1:
        return None
    least = min(per_step, key=per_step.get)
    most = max(per_step, key=per_step.get)
    if per_step[least] == per_step[most]:  # one total, other shapes
        first = min(signature)
        other = next(step for step in sorted(signature) if signature[step] != signature[first])
        return (f"the traced steps ran their ops on {len(kinds)} different sets of input shapes (steps {first} and "
                f"{other}, each {per_step[first]:,} input elements) on batches all of one size: a shape or a branch "
                "that follows the data needs a value of it on the host, however it got there (a read, a timing, a "
                "cache); keep every shape fixed (pad to the largest possible size, mask the rest)")
    return (f"the traced steps recorded {len(kinds)} different amounts of input (step {least}: {per_step[least]:,} "
            f"elements, step {most}: {per_step[most]:,}) on batches all of one size: a shape or a branch that follows "
            "the data needs a value of it on the host, however it got there (a read, a timing, a cache); keep every "
            "shape fixed (pad to the largest possible size, mask the rest)")
