"""What the grader believes of a run beyond its own clock: its weights (through the referee) and its trace
(when it lines up with the steps the grader stamped)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from checker.chapters import Chapter
from checker.errors import WorkbookError
from checker.runs import RunResult
from checker.sandbox import python_command

REFEREE_TIMEOUT_S = 600


class TraceMismatch(Exception):
    """A trace that does not show the run the grader stamped: the checks that read it fail."""


def trace_problem(trace, run: RunResult, warmup: int, trace_steps: int) -> str | None:
    """Why a trace cannot be the record of ``run``, or None when it can.

    The harness traces exactly the steps warmup .. warmup+trace_steps-1, once each. The grader stamped the
    same steps on its own clock as they started, so the span of the trace's steps must match the span the
    grader saw (give or take the profiler's own cost), and every step must hold work.
    """
    steps = trace.get_steps()
    expected = list(range(warmup, warmup + trace_steps))
    found = sorted(int(s) for s in steps["step"])
    if found != expected:
        shown = ", ".join(map(str, found[:12])) + (" ..." if len(found) > 12 else "")
        return (f"holds step ranges [{shown or 'none'}], but the harness ran steps {expected[0]}..{expected[-1]} "
                "once each: step ranges were added, removed or renamed")
    span_ns = int(steps["end_ns"].max() - steps["start_ns"].min())
    stamps = run.step_stamps_ns
    if len(stamps) >= 2:
        stamped_ns = stamps[-1] - stamps[0]
        if abs(span_ns - stamped_ns) > 0.25 * stamped_ns + 50e6:
            return (f"spans {span_ns / 1e6:.1f} ms of steps, but the grader saw those steps take "
                    f"{stamped_ns / 1e6:.1f} ms: it is not the record of the run that was graded")
    events = trace.events
    worked = events[events["step"].notna() & events["kind"].isin(["cpu_op", "cuda_api", "kernel"])]
    idle = sorted(set(expected) - {int(s) for s in worked["step"].unique()})
    if idle:
        return (f"shows no work in step(s) {', '.join(map(str, idle[:8]))}: the training ran somewhere the trace "
                "does not show it")
    return None


def ask_referee(chapter: Chapter, device: str, pairs: list[tuple[RunResult, RunResult]],
                workdir: Path, cfg: dict[str, Any] | None = None) -> dict[int, dict[str, Any]]:
    """Have the referee judge every pair's weights; by pair index: {"baseline": {...}, "candidate": {...}}."""
    folder = Path(tempfile.mkdtemp(prefix="referee-", dir=workdir))
    os.chmod(folder, 0o700)
    runs = []
    for index, (baseline, candidate) in enumerate(pairs):
        for role, run in (("baseline", baseline), ("candidate", candidate)):
            name = f"{role}{index}"
            path = folder / f"{name}.pt"
            path.write_bytes(run.weights or b"")
            runs.append({"name": name, "seed": run.seed, "window_key": run.window_key, "weights": str(path),
                         "reference": f"baseline{index}" if role == "candidate" else None})
    job = folder / "job.json"
    job.write_text(json.dumps({"chapter": chapter.id, "device": device, "runs": runs, "cfg": cfg or {}}))
    command = python_command("checker.referee") + [str(job)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=REFEREE_TIMEOUT_S,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise WorkbookError(f"the referee could not judge the weights (exit {proc.returncode}): {last}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for path in folder.glob("*.pt"):
        path.unlink()
    return {index: {"baseline": found[f"baseline{index}"], "candidate": found[f"candidate{index}"]}
            for index in range(len(pairs))}
