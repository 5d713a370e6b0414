"""Grade one candidate script of one chapter on one device: run the chapter's checks, in order."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checker import checks
from checker.chapters import Chapter
from checker.checks import FAILED, NOT_SELECTED, SKIPPED, CheckResult
from checker.errors import WorkbookError
from checker.paths import display_path
from checker.runs import IncompleteWork, RunResult, describe_phases, run_script
from checker.tools import find_tool

TRACE_TOOLS = ("torch", "nsys")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_device() -> str:
    return "cuda" if cuda_available() else "cpu"


def resolve_candidate(chapter: Chapter, variant: str = "lab", submission: Path | None = None) -> Path:
    """The script to grade: a variant of the chapter, or the lab file inside a submission folder."""
    if submission is None:
        return chapter.script_for(variant)
    submission = Path(submission)
    if not submission.is_dir():
        raise WorkbookError(f"--submission {submission}: not a folder")
    tried = [submission / chapter.lab_file, submission / chapter.id / chapter.lab_file,
             submission / "labs" / chapter.id / chapter.lab_file]
    for path in tried:
        if path.is_file():
            return path
    raise WorkbookError(f"--submission {submission}: no {chapter.lab_file} in it (looked in "
                        + ", ".join(str(p.relative_to(submission)) for p in tried) + ")")


@dataclass
class Report:
    chapter: str
    variant: str
    candidate: str
    device: str
    trace_tool: str
    checks: list[CheckResult]
    wall_s: float
    runs: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.status != FAILED for c in self.checks)

    @property
    def exit_code(self) -> int:
        """What `workbook check` exits with: 0 when every check passed (skips allowed), 1 when one failed."""
        return 0 if self.passed else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "chapter": self.chapter, "variant": self.variant, "candidate": self.candidate, "device": self.device,
            "trace_tool": self.trace_tool, "passed": self.passed, "wall_s": round(self.wall_s, 1),
            "checks": [c.to_json() for c in self.checks],
        }


class Evaluation:
    """The runs a chapter's checks share: baseline/candidate pairs and the candidate's trace, made once."""

    def __init__(self, chapter: Chapter, candidate: Path, device: str, trace_tool: str = "torch", with_ncu: bool = False,
                 keep_traces: Path | None = None, progress=None):
        if device not in ("cpu", "cuda"):
            raise WorkbookError(f"--device {device}: choose cpu or cuda")
        if device == "cuda" and not cuda_available():
            raise WorkbookError("--device cuda: this machine has no CUDA GPU that torch can use; try --device cpu")
        if trace_tool not in TRACE_TOOLS:
            raise WorkbookError(f"--trace-tool {trace_tool}: choose torch or nsys")
        if trace_tool == "nsys":
            if device != "cuda":
                raise WorkbookError("--trace-tool nsys traces CUDA work; use it with --device cuda, or use --trace-tool torch")
            if find_tool("nsys") is None:
                raise WorkbookError("--trace-tool nsys: nsys not found on PATH; install Nsight Systems, set WORKBOOK_NSYS=/path/to/nsys, or use --trace-tool torch")
        if not candidate.is_file():
            raise WorkbookError(f"{candidate}: no such file")
        self.chapter, self.candidate, self.device, self.trace_tool = chapter, candidate, device, trace_tool
        self.with_ncu = with_ncu  # checks that need Nsight Compute run only when asked (they take minutes)
        self.cfg = chapter.config(device)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"workbook-{chapter.id}-"))
        self._pairs: list[tuple[RunResult, RunResult]] | None = None
        self._trace = None
        self._trace_run: RunResult | None = None
        self._baseline_trace = None
        self._run_count = 0
        self.keep_traces = keep_traces  # where to copy each trace a check read (--keep-traces)
        self.progress = progress  # called with one line before each run of a script (the CLI prints it on a terminal)

    def is_log_step(self, step: int) -> bool:
        log_every = int(self.cfg.get("log_every", 0))
        return bool(log_every) and (step + 1) % log_every == 0

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def _run(self, script: Path, what: str = "run", **kwargs) -> RunResult:
        self.say(f"{what}: {display_path(script)}")
        self._run_count += 1
        workdir = self.workdir / f"run{self._run_count:02d}"
        workdir.mkdir()
        run = run_script(self.chapter, script, self.device, workdir=workdir, **kwargs)
        self.say(f"  {sum(run.phases_s.values()):.1f} s: {describe_phases(run.phases_s)}")
        return run

    def pairs(self) -> list[tuple[RunResult, RunResult]]:
        """(baseline, candidate) runs, alternating which goes first; several trials when speed is checked."""
        if self._pairs is None:
            timed = any(c.name == "throughput" and c.threshold_for(self.device) is not None for c in self.chapter.checks)
            trials = int(self.cfg.get("trials", 3)) if timed else 1
            baseline = self.chapter.slow_script
            self._pairs = []
            for trial in range(trials):
                what = f"timed run, trial {trial + 1} of {trials}"
                if trial % 2 == 0:
                    b = self._run(baseline, what)
                    c = self._run(self.candidate, what)
                else:
                    c = self._run(self.candidate, what)
                    b = self._run(baseline, what)
                self._pairs.append((b, c))
        return self._pairs

    def trace(self):
        """The candidate's steady-state steps, traced with the chosen tool and loaded by checker.trace."""
        if self._trace is None:
            self._trace_run, self._trace = self._traced(self.candidate)
        return self._trace

    def baseline_trace(self):
        """The slow script's steady-state steps, traced the same way (for checks that compare counts)."""
        if self._baseline_trace is None:
            self._baseline_trace = self._traced(self.chapter.slow_script)[1]
        return self._baseline_trace

    def timed_pairs_if_run(self) -> list[tuple[RunResult, RunResult]]:
        """The timed pairs when a check has already run them, else none (so that --only spares them)."""
        return self._pairs or []

    def candidate_run(self) -> RunResult:
        """Any finished run of the candidate: the first timed one, else the traced one (run if need be)."""
        if self._pairs:
            return self._pairs[0][1]
        self.trace()
        return self._trace_run

    def _traced(self, script: Path):
        from checker.trace import load

        steps = int(self.cfg["warmup"]) + int(self.cfg.get("trace_steps", 10))
        run = self._run(script, f"traced run ({self.trace_tool})", steps=steps, trace=self.trace_tool)
        trace_file = run.trace_file
        if self.keep_traces is not None and trace_file is not None:
            role = "baseline" if script == self.chapter.slow_script else "candidate"
            self.keep_traces.mkdir(parents=True, exist_ok=True)
            suffix = "".join(trace_file.suffixes[-2:]) if trace_file.name.endswith(".gz") else trace_file.suffix
            shutil.copy(trace_file, self.keep_traces / f"{self.chapter.id}-{role}-{self.trace_tool}{suffix}")
        return run, load(trace_file)

    def run_checks(self, variant_label: str, only: set[str] | None = None) -> Report:
        """Run the chapter's checks in order; with ``only``, the others are reported as skipped."""
        if only:
            declared = [spec.name for spec in self.chapter.checks]
            unknown = sorted(set(only) - set(declared))
            if unknown:
                raise WorkbookError(f"--only {','.join(unknown)}: {self.chapter.id} has no such check; "
                                    f"its checks: {', '.join(declared)}")
        started = time.perf_counter()
        results: list[CheckResult] = []
        failed_first: set[str] = set()
        incomplete = False
        for spec in self.chapter.checks:
            function = checks.REGISTRY.get(spec.name)
            if function is None:
                raise WorkbookError(f"{self.chapter.id}/chapter.toml declares an unknown check '{spec.name}'; "
                                    f"known: {', '.join(sorted(checks.REGISTRY))}")
            skip = spec.skip_reason_for(self.device)
            if skip is None and only and spec.name not in only:
                skip = f"{NOT_SELECTED} (--only {','.join(sorted(only))})"
            if spec.threshold_for(self.device) is None and spec.name != "same_work" and skip is None:
                skip = f"no threshold for {self.device} in {self.chapter.id}/chapter.toml"
            if skip is None and "same_work" in failed_first and spec.name == "throughput":
                skip = "the work differs from the baseline's, so their speeds are not comparable"
            if skip is None and incomplete:
                skip = "the candidate did not run every step, so nothing else can be measured"
            if skip is not None:
                results.append(checks.result(spec, SKIPPED, reason=skip, threshold=spec.threshold_for(self.device)))
                continue
            try:
                outcome = function(self, spec)
            except IncompleteWork as err:
                incomplete = True
                outcome = checks.result(spec, FAILED, evidence=[str(err)])
            if outcome.status == FAILED:
                failed_first.add(spec.name)
                outcome.hint = self.chapter.hint_for(spec.name, outcome.evidence)
            results.append(outcome)
        report = Report(
            chapter=self.chapter.id, variant=variant_label, candidate=str(self.candidate), device=self.device,
            trace_tool=self.trace_tool, checks=results, wall_s=time.perf_counter() - started,
        )
        return report

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def evaluate(chapter: Chapter, *, variant: str = "lab", submission: Path | None = None, device: str | None = None,
             trace_tool: str = "torch", with_ncu: bool = False, keep: bool = False,
             keep_traces: Path | None = None, only: set[str] | None = None, progress=None) -> Report:
    candidate = resolve_candidate(chapter, variant, submission)
    ev = Evaluation(chapter, candidate, device or default_device(), trace_tool, with_ncu, keep_traces, progress)
    try:
        return ev.run_checks(str(submission) if submission else variant, only=only)
    finally:
        if not keep:
            ev.cleanup()
