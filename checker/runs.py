"""Run a chapter script in its own process through ``checker.launch`` and read back its result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checker.chapters import Chapter
from checker.errors import WorkbookError
from checker.paths import display_path, repo_root
from checker.tools import find_tool
from checker.trace.nsys import export_report


class ScriptError(WorkbookError):
    """The candidate script crashed or hung: reported as one line, exit 2."""


class IncompleteWork(Exception):
    """The script ran but left the step loop early: its work differs from the baseline's (a failed check)."""


@dataclass
class RunResult:
    script: Path
    samples_per_s: float | None
    samples: int
    window_s: float | None
    eval_loss: float | None
    step_ms: list[float]
    raw: dict[str, Any] = field(repr=False)
    trace_file: Path | None = None
    phases_s: dict[str, float] = field(default_factory=dict)


# (name, from mark, to mark): where the seconds of one run went; "spawn" and "exit" are the checker's own marks
PHASES = (
    ("start-up", "spawn", "launched"),        # Python, torch and the checker imported (nsys starting, when tracing)
    ("build", "launched", "built"),           # the script's imports and the chapter's workload
    ("setup", "built", "first_step"),         # the script's own setup (model, optimizer, DataLoader)
    ("warm-up", "first_step", "window"),      # untimed steps: torch.compile, autotuning, workers starting
    ("timed", "window", "window_end"),        # the measured window
    ("after", "window_end", "evaluated"),     # trace export, the rest of the script, the held-out loss
    ("exit", "evaluated", "exit"),            # the process ending (atexit work, worker pools), nsys's report
)


def phases(clock: dict[str, float]) -> dict[str, float]:
    """Seconds per phase of one run, from time.monotonic() marks (one clock for all processes on a machine)."""
    return {name: round(clock[b] - clock[a], 2) for name, a, b in PHASES if a in clock and b in clock}


def describe_phases(seconds: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.1f}" for name, value in seconds.items())


def run_script(
    chapter: Chapter,
    script: Path,
    device: str,
    *,
    steps: int | None = None,
    trace: str | None = None,
    workdir: Path | None = None,
    extra_args: list[str] | None = None,
) -> RunResult:
    """Run ``script`` for ``chapter`` on ``device`` in a fresh process.

    ``trace`` is None, "torch" (torch.profiler over the window) or "nsys" (the process runs under
    ``nsys profile --capture-range=cudaProfilerApi``; the report is exported to SQLite).
    """
    cfg = chapter.config(device)
    timeout = float(os.environ.get("WORKBOOK_TIMEOUT_S") or cfg.get("timeout_s", 300))
    workdir = Path(workdir or tempfile.mkdtemp(prefix="workbook-"))
    result_path = workdir / "result.json"
    script_args = ["--device", device]
    if steps is not None:
        script_args += ["--steps", str(steps)]
    script_args += extra_args or []
    command = [sys.executable, "-m", "checker.launch", "--script", str(script), "--result", str(result_path)]
    trace_file = None
    if trace == "torch":
        trace_file = workdir / "trace.json.gz"
        command += ["--trace", "torch", "--trace-out", str(trace_file)]
    elif trace == "nsys":
        nsys = find_tool("nsys")
        if nsys is None:
            raise WorkbookError("--trace-tool nsys: nsys not found on PATH; install Nsight Systems or set WORKBOOK_NSYS=/path/to/nsys")
        report = workdir / "trace"
        command = [
            nsys, "profile", "-t", "cuda,nvtx,osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
            "--force-overwrite=true", "-o", str(report), *command,
        ]
        trace_file = report.with_suffix(".nsys-rep")
    command += ["--", *script_args]
    env = dict(os.environ, WORKBOOK_ROOT=str(repo_root()), PYTHONUNBUFFERED="1")
    spawned = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ScriptError(
            f"{display_path(script)} did not finish within {timeout:.0f} s on {device} (a hang? an endless loop?); "
            f"the limit is timeout_s in {chapter.id}/chapter.toml"
        ) from None
    if not result_path.exists():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ScriptError(f"{display_path(script)} stopped without a result (exit {proc.returncode}): {last}")
    raw = json.loads(result_path.read_text())
    if raw.get("incomplete"):
        raise IncompleteWork(f"work differs: {display_path(script)} {raw['incomplete']}")
    if "error" in raw:
        where = f" at {raw['where']}" if raw.get("where") else ""
        raise ScriptError(f"{display_path(script)} failed{where}: {raw['error']}")
    if trace == "nsys":
        if not trace_file.exists():
            raise WorkbookError(f"nsys wrote no report at {trace_file}; if only a .qdstrm appeared, nsys's importer "
                                "could not run (on some systems it needs libdw.so.1)")
        trace_file = export_report(trace_file, workdir)
    clock = dict(raw.get("clock") or {}, spawn=spawned, exit=time.monotonic())
    return RunResult(
        script=script,
        samples_per_s=raw.get("samples_per_s"),
        samples=int(raw.get("samples", 0)),
        window_s=raw.get("window_s"),
        eval_loss=raw.get("eval_loss"),
        step_ms=list(raw.get("step_ms", [])),
        raw=raw,
        trace_file=Path(raw["trace_file"]) if trace == "torch" and raw.get("trace_file") else trace_file,
        phases_s=phases(clock),
    )

