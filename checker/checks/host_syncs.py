"""host_syncs: no host-device synchronization inside training steps, logging steps excepted.

Counted in the candidate's own trace (torch.profiler or nsys) by checker.trace: on CUDA the
cudaStreamSynchronize / cudaDeviceSynchronize / cudaEventSynchronize calls and synchronous copies; on a CPU
trace the aten ops that would sync on a GPU. Each is traced back to its line in the script when the trace
holds Python frames.
"""

from __future__ import annotations

import linecache
from pathlib import Path

from checker.checks import FAILED, PASSED, TRACE, check, result
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


@check("host_syncs", needs=(TRACE,), key="host_syncs_per_step", fmt="{:g} syncs/step")
def host_syncs(evidence, spec):
    """no host-device syncs inside training steps (logging steps excepted)"""
    threshold = float(spec.threshold_for(evidence.device))
    trace = evidence.trace()
    steps = trace.get_steps()
    log_steps = {int(s) for s in steps["step"] if evidence.is_log_step(int(s))}
    counted = [int(s) for s in steps["step"] if int(s) not in log_steps]
    if not counted:
        return result(spec, FAILED, threshold=threshold, evidence=["the trace holds no training steps outside logging steps"])
    syncs = trace.get_host_syncs(exclude_steps=log_steps)
    per_step = len(syncs) / len(counted)
    measured = {
        "host_syncs_per_step": round(per_step, 3),
        "host_syncs": int(len(syncs)),
        "steps": len(counted),
        "logging_steps_excluded": sorted(log_steps),
        "trace_tool": evidence.trace_tool,
    }
    lines = []
    # torch.profiler before 2.12 records no call sites: a frame's line there is where it stood, not the call
    lines_recorded = trace.has_call_lines
    if len(syncs):
        grouped = syncs.groupby(["name", "where", "in_fetch"], dropna=False).size().sort_values(ascending=False)
        for (name, where, fetching), count in grouped.items():
            where = as_graded(where, evidence.candidate_run, evidence.candidate)
            if where and not lines_recorded:
                origin = f"{where.rpartition(':')[0]} (this torch.profiler records no call lines; torch >= 2.12 does)"
            else:
                origin = source_line(where, evidence.candidate)
            if fetching:  # the harness's `data` range: no line of the loop's body made it
                lines.append(f"{count / len(counted):g} per step: {name} while session.steps() fetched the next "
                             "batch, made by the DataLoader, its sampler or dataset (a DataLoader whose workers do "
                             f"not outlive an epoch starts anew each epoch), iterated at {origin}")
            else:
                lines.append(f"{count / len(counted):g} per step: {name} from {origin}")
    status = PASSED if per_step <= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)
