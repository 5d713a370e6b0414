"""The traces a diagnosis names (chapter 08): the learner's own measurements, read by the grader as data.

An answer shows its work: each job's table names the trace its numbers were read from (``trace = "..."``,
relative to the answer file), a torch.profiler trace the learner made of that job. The grader reads each named
file itself, here, before any run: a path that leaves the answer's folder, a file that is not a regular file,
one larger than MAX_TRACE_BYTES or one the trace engine cannot read is that job's problem, said in one line.
What the trace shows is judged by the triage check (checker/checks/triage.py): whether it is a trace of that job
(its matrix multiplies' shapes are the job's sizes, which differ from job to job and from learner to learner),
and whether the numbers quoted are the numbers it holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checker.trace.errors import TraceError

MAX_TRACE_BYTES = 64 << 20  # a CPU trace of the busiest practice job is about 2 MB (compressed)


def read_shown(answer: dict | None, folder: Path, jobs) -> dict[str, Any]:
    """job -> the TraceAnalysis of the trace its answer names, or the one line saying why there is none."""
    from checker.trace import load

    tables = answer.get("jobs") if isinstance(answer, dict) and isinstance(answer.get("jobs"), dict) else {}
    shown: dict[str, Any] = {}
    root = folder.resolve()
    for job in jobs:
        given = tables.get(job) if isinstance(tables.get(job), dict) else {}
        name = given.get("trace")
        how = f"`workbook profile 08 --tool torch --run --job {job}` writes profiles/lab-torch-job-{job}.json.gz"
        if not isinstance(name, str) or not name.strip():
            shown[job] = (f"trace = {name!r}: name the trace you read this job's numbers from, beside your answer "
                          f"({how})" if name is not None else
                          f"no trace named: add trace = \"...\", the trace you read this job's numbers from ({how})")
            continue
        path = folder / name.strip()
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            shown[job] = f"trace = {name!r} cannot be resolved (a symlink loop?)"
            continue
        if not real.is_relative_to(root):
            shown[job] = f"trace = {name!r} is outside the answer's folder: keep your traces beside your answer"
        elif not real.is_file():
            shown[job] = f"trace = {name!r}: no such file beside your answer ({how})"
        elif real.stat().st_size > MAX_TRACE_BYTES:
            shown[job] = (f"trace = {name!r} is {real.stat().st_size >> 20} MiB, more than the {MAX_TRACE_BYTES >> 20} "
                          "MiB the grader reads: trace fewer steps (--steps 10)")
        else:
            try:
                shown[job] = load(real)
            except TraceError as err:
                shown[job] = f"trace = {name!r} cannot be read: {' '.join(str(err).split())[:300]}"
            except (OSError, ValueError, MemoryError) as err:
                shown[job] = f"trace = {name!r} cannot be read ({type(err).__name__})"
    return shown
