"""Nsight Compute run by the grader: one kernel of the candidate's, in one step, through the same runner and
sandbox as every other run (a private copy of the script, an unprivileged user, limits, the grader's clock).

A check that needs NCU names its target (``ncu_target`` in checker.checks); the grader profiles it here,
imports the report to CSV itself, and probes this GPU's device-to-device copy bandwidth in a process of its own,
so the check compares a kernel's DRAM throughput with what this GPU's memory really streams.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from checker.base.paths import repo_root
from checker.base.tools import find_tool, missing_tool
from checker.checks.evidence import NcuOutcome, NcuTarget
from checker.grader.runs import ScriptError, new_secret


def measure_copy_bandwidth(size_bytes: int = 1 << 30, repeats: int = 20) -> float:
    """Bytes per second a device-to-device copy streams (read + write), timed with CUDA events."""
    import torch

    source = torch.empty(size_bytes // 4, dtype=torch.float32, device="cuda").uniform_()
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        target.copy_(source)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / repeats
    return 2 * source.numel() * source.element_size() / seconds


def copy_bandwidth_in_subprocess(timeout: float = 120) -> float:
    code = "from checker.grader.ncu import measure_copy_bandwidth as m; print(m())"
    env = dict(os.environ, WORKBOOK_ROOT=str(repo_root()))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["the copy probe failed"])[-1])
    return float(proc.stdout.strip().splitlines()[-1])


def ncu_options(target: NcuTarget) -> list[str]:
    """ncu's options for one launch of the target kernel inside step ``target.step`` (the report's path is the
    runner's to add)."""
    options = ["--nvtx", "--nvtx-include", f"step {target.step}/", "--kernel-name-base", "demangled",
               "-k", target.kernel_regex, "-c", "1", "--clock-control", "none", "--force-overwrite"]
    for section in target.sections:
        options += ["--section", section]
    if target.metrics:
        options += ["--metrics", ",".join(target.metrics)]
    return options


def ncu_problem(output: str) -> str | None:
    """A reason to skip when ncu could not profile on this machine at all."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or load the "
                "driver with NVreg_RestrictProfilingToAdminUsers=0")
    return None


def shown(command: list[str]) -> str:
    return " ".join(f"'{part}'" if (" " in part or "|" in part or "$" in part) else part for part in command)


def profile_kernel(runner, target: NcuTarget) -> NcuOutcome:
    """Run the candidate under ncu for ``target`` (through the check's runner: checker.grader.pairs.Runner), import
    the report, probe the copy bandwidth."""
    if target.problem:
        return NcuOutcome(target)
    ncu = find_tool("ncu")
    if ncu is None:
        return NcuOutcome(target, skip=missing_tool("ncu"))
    options = ncu_options(target)
    command = shown(["ncu", *options, "python", runner.candidate.name])
    runner.say(f"Nsight Compute on {target.shown} in step {target.step} (ncu replays it: a minute or two)")
    try:
        run = runner.run(runner.candidate, "Nsight Compute run", new_secret(),
                              steps=target.step + 2, profiler=("ncu", ncu, options))
    except ScriptError as err:
        problem = ncu_problem(str(err))
        if problem:
            return NcuOutcome(target, skip=problem, command=command)
        return NcuOutcome(target, failure=f"the run under ncu failed: {err}", command=command)
    problem = ncu_problem(run.output_tail)
    if problem:
        return NcuOutcome(target, skip=problem, command=command)
    report = run.trace_file
    if report is None or not report.exists():
        last = [line for line in run.output_tail.splitlines() if line.strip()][-3:]
        return NcuOutcome(target, failure=f"ncu wrote no report: {' | '.join(last)}", command=command)
    imported = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"],
                              capture_output=True, text=True, timeout=300, check=False)
    keep = os.environ.get("WORKBOOK_NCU_OUT")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        stem = f"{runner.chapter.id}-{runner.candidate.parent.parent.name}"  # e.g. 05_pointwise_chains-solutions
        shutil.copy(report, Path(keep) / f"{stem}.ncu-rep")
        (Path(keep) / f"{stem}.csv").write_text(imported.stdout)
    try:
        copy_rate = copy_bandwidth_in_subprocess()
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as err:
        return NcuOutcome(target, csv=imported.stdout, failure=f"the copy-bandwidth probe failed: {err}", command=command)
    return NcuOutcome(target, csv=imported.stdout, copy_bytes_per_s=copy_rate, command=command)
