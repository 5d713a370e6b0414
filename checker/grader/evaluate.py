"""Grade one candidate script of one chapter on one device: run the chapter's checks, in order."""

from __future__ import annotations

import secrets
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checker import checks
from checker.grader import sandbox
from checker.grader.baseline import BaselineBank
from checker.base.chapters import Chapter
from checker.checks import FAILED, NOT_SELECTED, SKIPPED, CheckResult
from checker.base.errors import WorkbookError
from checker.grader.collect import TraceMismatch, ask_referee as judge, trace_problem
from checker.base.paths import display_path
from checker.grader.scan import refuse_probes
from checker.grader.runs import IncompleteWork, RunResult, describe_phases, run_script
from checker.base.tools import find_tool

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
    submission = Path(submission).expanduser().resolve()  # relative to where the command was given
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
    notes: list[str] = field(default_factory=list)  # what the grader saw besides the checks (processes left running)
    timings: list[dict[str, Any]] = field(default_factory=list)  # where the check's seconds went, on the grader's clock

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
            "checks": [c.to_json() for c in self.checks], "notes": self.notes, "timings": self.timings,
        }


class Evaluation:
    """The runs a chapter's checks share, made once each, and what the grader makes of them.

    Every run trains under a fresh secret (seed and window key, see checker.base.workloads). Runs come in pairs,
    a baseline and a candidate run under the same secret, so that the referee can compare their weights:

    * the timed pairs (only where this device grades speed): untraced, alternating which runs first;
    * the traced pair: the candidate traced with the chosen tool, its baseline traced too when a check
      compares counts with the baseline's trace. Where speed is not graded it is the only pair, so the run
      whose trace is read is also the run whose work is checked: a script cannot behave one way when traced
      and another way when it is not.
    """

    def __init__(self, chapter: Chapter, candidate: Path, device: str, trace_tool: str = "torch", with_ncu: bool = False,
                 keep_traces: Path | None = None, progress=None, only: set[str] | None = None,
                 bank: BaselineBank | None = None):
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
        refuse_probes(candidate, display_path(candidate))
        self.chapter, self.candidate, self.device, self.trace_tool = chapter, candidate, device, trace_tool
        self.with_ncu = with_ncu  # checks that need Nsight Compute run only when asked (they take minutes)
        self.cfg = chapter.config(device)
        self.only = only
        self.workdir = sandbox.check_folder()
        self.timed = any(c.name == "throughput" and c.threshold_for(device) is not None
                         and c.skip_reason_for(device) is None and (not only or c.name in only)
                         for c in chapter.checks)
        # a chapter about loading data: a CPU trace's time spent waiting for a batch is the lesson, not hidden work
        self.loads_data = any(c.name in ("data_wait", "loader_settings") for c in chapter.checks)
        self._pairs: list[tuple[RunResult, RunResult]] | None = None
        self._traced_pair: tuple[RunResult, RunResult] | None = None
        self._traces: dict[str, Any] = {}
        self._verdicts: dict[int, dict] | None = None
        self.keep_traces = keep_traces  # where to copy each trace a check read (--keep-traces)
        self.progress = progress  # called with one line before each run of a script (the CLI prints it on a terminal)
        self.notes: list[str] = [f"isolation: each run {sandbox.isolation()[1]}"]
        wanted = [spec.name for spec in chapter.checks if not only or spec.name in only]
        self.needs_baseline_trace = any(name in checks.NEEDS_BASELINE_TRACE for name in wanted)
        self.bank = bank
        self._reference_noted = False
        self.timings: list[dict[str, Any]] = []
        self._t0 = time.perf_counter()
        self.reference_script = self._reference_script()
        self.uses_bank = self.reference_script != chapter.slow_script
        self.reference_label = "reference solution" if self.uses_bank else "baseline"

    def _reference_script(self) -> Path:
        """The script trained beside each candidate run, under its secret: the slow script, unless a grading
        worker shares the slow script's speed (a BaselineBank), where the chapter's reference solution does the
        same work in less time. Chapters whose checks read the slow script's trace keep the slow script."""
        slow = self.chapter.slow_script
        if self.bank is None:
            return slow
        if self.needs_baseline_trace:
            self.notes.append("baseline: each student's runs are paired with the slow script's: "
                              f"{self.chapter.id}'s checks compare counts with its trace")
            return slow
        solution = self.chapter.solution_script
        if not solution.is_file():
            self.notes.append(f"baseline: each student's runs are paired with the slow script's: there is no "
                              f"reference solution ({display_path(solution)}) to train beside them")
            return slow
        return solution

    def is_log_step(self, step: int) -> bool:
        log_every = int(self.cfg.get("log_every", 0))
        return bool(log_every) and (step + 1) % log_every == 0

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def _run(self, script: Path, what: str, secret: tuple[int, int], **kwargs) -> RunResult:
        shown = display_path(script)
        self.say(f"{what}: {shown}")
        seed, key = secret
        began = time.perf_counter()
        run = run_script(self.chapter, script, self.device, workdir=self.workdir, seed=seed, window_key=key,
                         display=shown, **kwargs)
        self._timing("run", what, began, script=shown, trace=kwargs.get("trace"), phases=run.phases_s)
        self.say(f"  {sum(run.phases_s.values()):.1f} s: {describe_phases(run.phases_s)}")
        if run.survivors:
            left = "1 process" if run.survivors == 1 else f"{run.survivors} processes"
            self.notes.append(f"{shown} left {left} running after it finished; the grader "
                              "killed them")
        return run

    def _timing(self, kind: str, what: str, began: float, **extra) -> None:
        self.timings.append({"kind": kind, "what": what, "start_s": round(began - self._t0, 2),
                             "wall_s": round(time.perf_counter() - began, 2), **extra})

    @staticmethod
    def _secret() -> tuple[int, int]:
        return secrets.randbelow(2**31 - 1) + 1, secrets.randbelow(2**31 - 1) + 1

    def pairs(self) -> list[tuple[RunResult, RunResult]]:
        """The (baseline, candidate) pairs whose speed is compared: the timed pairs, or where this device does
        not grade speed, the traced pair."""
        if not self.timed:
            return [self.traced_pair()]
        if self._pairs is None:
            trials = int(self.cfg.get("trials", 3))
            baseline = self.reference_script
            if self.uses_bank:
                self._measure_bank(trials)
            self._pairs = []
            for trial in range(trials):
                what = f"timed run, trial {trial + 1} of {trials}"
                secret = self._secret()
                if trial % 2 == 0:
                    b = self._run(baseline, what, secret)
                    c = self._run(self.candidate, what, secret)
                else:
                    c = self._run(self.candidate, what, secret)
                    b = self._run(baseline, what, secret)
                self._pairs.append((b, c))
        return self._pairs

    def _measure_bank(self, trials: int) -> None:
        """The slow script's timed runs this worker still owes: ``trials`` of them for its first student, then
        one every few students. The first is also the one the reference solution is checked against."""
        due = self.bank.due(trials)
        for number in range(due):
            run = self._run(self.chapter.slow_script, f"the slow script's speed on this worker, run {number + 1} "
                            f"of {due}", self._secret())
            self.bank.add(run.window_s, run.samples)
            self.bank.runs += 1
            if self.bank.reference is None:
                self._check_reference(run)
        self._ensure_reference_checked()

    def _ensure_reference_checked(self) -> None:
        if self.bank.reference is None:
            run = self._run(self.chapter.slow_script, "the slow script, to check the reference solution against",
                            self._secret(), steps=self._traced_steps())
            self.bank.runs += 1
            self._check_reference(run)
        if not self.bank.reference.get("agrees"):
            raise WorkbookError(self.bank.reference["why"])
        if self._reference_noted:
            return
        self._reference_noted = True
        self.notes.append(
            f"baseline: speed compared with the slow script's on this worker ({self.bank.summary() or 'not timed here'}); "
            f"work compared with the reference solution trained under the same secret, which agreed with the slow "
            f"script's work (weights {self.bank.reference['distance']:.3f} of its training apart)")

    def _check_reference(self, slow: RunResult) -> None:
        """Train the reference solution under the slow run's secret; the referee must find the same work."""
        from checker.checks.same_work import pair_problems, tolerances

        reference = self._run(self.reference_script, "the reference solution, under the same secret",
                              (slow.seed, slow.window_key), steps=slow.steps or None)
        judged = judge(self.chapter, self.device, [(slow, reference)], self.workdir)[0]
        spec = next((c for c in self.chapter.checks if c.name == "same_work"), None)
        problems, distance = pair_problems(judged, tolerances(spec, self.device), "slow script")
        self.bank.reference = {"agrees": not problems, "distance": round(distance, 4), "problems": problems,
                               "why": (f"the reference solution {display_path(self.reference_script)} does not do the "
                                       f"slow script's work ({'; '.join(problems)}): no student can be judged "
                                       "against it; restore it (git checkout) and grade again")}

    def _traced_steps(self) -> int:
        return int(self.cfg["warmup"]) + int(self.cfg.get("trace_steps", 10))

    def speed(self) -> tuple[list[float], list[float], list[float], int]:
        """(speedup per timed candidate run, the baseline windows it was compared with, the candidate's
        windows, the slow script's samples per window)."""
        pairs = self.pairs()
        candidate = [c.window_s for _, c in pairs]
        if self.uses_bank:
            recent = self.bank.recent(len(pairs))
            baseline = [w["window_s"] for w in recent]
            middle = statistics.median(baseline)
            return [middle / c for c in candidate], baseline, candidate, int(recent[-1]["samples"])
        baseline = [b.window_s for b, _ in pairs]
        return [b / c for b, c in zip(baseline, candidate)], baseline, candidate, pairs[0][0].samples

    def all_pairs(self) -> list[tuple[RunResult, RunResult]]:
        """The pairs whose speed is compared, and the traced pair when it was made: whatever the candidate
        ran, its work is checked."""
        pairs = list(self.pairs())
        if self._traced_pair is not None and self._traced_pair not in pairs:
            pairs.append(self._traced_pair)
        return pairs

    def traced_pair(self) -> tuple[RunResult, RunResult]:
        if self._traced_pair is None:
            steps = self._traced_steps()
            trace_baseline = self.needs_baseline_trace  # then the reference is the slow script (_reference_script)
            if self.uses_bank and self._pairs is None:
                self._ensure_reference_checked()
            secret = self._secret()
            tool = f"traced run ({self.trace_tool})"
            b = self._run(self.reference_script, tool if trace_baseline else f"{self.reference_label} run", secret,
                          steps=steps, trace=self.trace_tool if trace_baseline else None)
            c = self._run(self.candidate, tool, secret, steps=steps, trace=self.trace_tool)
            self._traced_pair = (b, c)
        return self._traced_pair

    def timed_pairs_if_run(self) -> list[tuple[RunResult, RunResult]]:
        """The timed pairs when a check has already run them, else none (so that --only spares them)."""
        return self._pairs or []

    def candidate_run(self) -> RunResult:
        """The candidate's traced run (its trace, its workers, its step times)."""
        return self.traced_pair()[1]

    def trace(self):
        """The candidate's steady-state steps, traced with the chosen tool and checked against the steps the
        grader stamped (a trace that does not line up raises TraceMismatch)."""
        return self._load_trace("candidate", self.traced_pair()[1])

    def baseline_trace(self):
        """The slow script's steady-state steps, traced the same way (for checks that compare counts)."""
        baseline = self.traced_pair()[0]
        if baseline.trace_file is None:  # the traced pair was made without it (--only); trace it now
            baseline = self._run(self.chapter.slow_script, f"traced run ({self.trace_tool})", self._secret(),
                                 steps=int(self.cfg["warmup"]) + int(self.cfg.get("trace_steps", 10)),
                                 trace=self.trace_tool)
        return self._load_trace("baseline", baseline)

    def _load_trace(self, role: str, run: RunResult):
        from checker.trace import load

        if role not in self._traces:
            trace_file = run.trace_file
            if self.keep_traces is not None and trace_file is not None:
                self.keep_traces.mkdir(parents=True, exist_ok=True)
                suffix = "".join(trace_file.suffixes[-2:]) if trace_file.name.endswith(".gz") else trace_file.suffix
                shutil.copy(trace_file, self.keep_traces / f"{self.chapter.id}-{role}-{self.trace_tool}{suffix}")
            began = time.perf_counter()
            trace = load(trace_file)
            self._timing("parse", f"{role}'s trace", began)
            problem = trace_problem(trace, run, int(self.cfg["warmup"]), int(self.cfg.get("trace_steps", 10)), self.device,
                                    excuse_data_wait=self.loads_data)
            self._traces[role] = TraceMismatch(f"the {role}'s trace {problem}") if problem else trace
        found = self._traces[role]
        if isinstance(found, TraceMismatch):
            raise found
        return found

    def verdicts(self) -> dict[int, dict]:
        """The referee's findings for every pair so far, by index into all_pairs(): the held-out loss of both
        runs, and how far the candidate's weights are from the baseline's."""
        pairs = self.all_pairs()
        if self._verdicts is None or len(self._verdicts) != len(pairs):
            self.say("referee: the trained weights, in a fresh process")
            began = time.perf_counter()
            self._verdicts = judge(self.chapter, self.device, pairs, self.workdir)
            self._timing("referee", f"{len(pairs)} pairs' weights", began)
        return self._verdicts

    def run_checks(self, variant_label: str, only: set[str] | None = None) -> Report:
        """Run the chapter's checks in order; with ``only``, the others are reported as skipped."""
        if only:
            declared = [spec.name for spec in self.chapter.checks]
            unknown = sorted(set(only) - set(declared))
            if unknown:
                raise WorkbookError(f"--only {','.join(unknown)}: {self.chapter.id} has no such check; "
                                    f"its checks: {', '.join(declared)}")
        started = time.perf_counter()
        began_ns = time.time_ns()
        wrote_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # the grader changes no file either
        try:
            results = self._run_all(only)
        finally:
            sys.dont_write_bytecode = wrote_bytecode
        changed = sandbox.changed_since(began_ns, sandbox.trusted_folders())
        if changed:
            raise WorkbookError(
                f"files the grader relies on changed while {display_path(self.candidate)} was graded "
                f"({', '.join(changed)}): the verdict is withheld. Restore them (git checkout, or reinstall the "
                "package) and check again")
        return Report(
            chapter=self.chapter.id, variant=variant_label, candidate=str(self.candidate), device=self.device,
            trace_tool=self.trace_tool, checks=results, wall_s=time.perf_counter() - started, notes=self.notes,
            timings=self.timings,
        )

    def _static_skip(self, spec, only: set[str] | None) -> str | None:
        skip = spec.skip_reason_for(self.device)
        if skip is None and only and spec.name not in only:
            skip = f"{NOT_SELECTED} (--only {','.join(sorted(only))})"
        if spec.threshold_for(self.device) is None and spec.name != "same_work" and skip is None:
            skip = f"no threshold for {self.device} in {self.chapter.id}/chapter.toml"
        return skip

    def _make_runs(self, selected: list[str]) -> None:
        """Every run the selected checks read, made before the first check, so that same_work judges them all."""
        if self.timed and {"throughput", "same_work"} & set(selected):
            self.pairs()
        if set(selected) - {"throughput", "same_work"} or not self.timed:
            self.traced_pair()

    def _run_all(self, only: set[str] | None) -> list[CheckResult]:
        for spec in self.chapter.checks:
            if spec.name not in checks.REGISTRY:
                raise WorkbookError(f"{self.chapter.id}/chapter.toml declares an unknown check '{spec.name}'; "
                                    f"known: {', '.join(sorted(checks.REGISTRY))}")
        skips = {spec.name: self._static_skip(spec, only) for spec in self.chapter.checks}
        incomplete: IncompleteWork | None = None
        try:
            self._make_runs([name for name, skip in skips.items() if skip is None])
        except IncompleteWork as err:
            incomplete = err
        results: list[CheckResult] = []
        failed_first: set[str] = set()
        for spec in self.chapter.checks:
            skip = skips[spec.name]
            if skip is None and "same_work" in failed_first and spec.name == "throughput":
                skip = "the work differs from the baseline's, so their speeds are not comparable"
            if skip is None and incomplete is not None and failed_first:
                skip = "the candidate did not run every step, so nothing else can be measured"
            if skip is not None:
                results.append(checks.result(spec, SKIPPED, reason=skip, threshold=spec.threshold_for(self.device)))
                continue
            try:
                if incomplete is not None:
                    raise incomplete
                outcome = checks.REGISTRY[spec.name](self, spec)
            except IncompleteWork as err:
                incomplete = err
                outcome = checks.result(spec, FAILED, evidence=[str(err)])
            except TraceMismatch as err:
                outcome = checks.result(spec, FAILED, evidence=[str(err)], threshold=spec.threshold_for(self.device))
            if outcome.status == FAILED:
                failed_first.add(spec.name)
                outcome.hint = self.chapter.hint_for(spec.name, outcome.evidence)
            results.append(outcome)
        return results

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def evaluate(chapter: Chapter, *, variant: str = "lab", submission: Path | None = None, device: str | None = None,
             trace_tool: str = "torch", with_ncu: bool = False, keep: bool = False,
             keep_traces: Path | None = None, only: set[str] | None = None, progress=None,
             bank: BaselineBank | None = None) -> Report:
    """Grade one script. ``bank``: the slow script's speed shared by a grading worker's students (see
    checker.grader.baseline); without it, every candidate run is paired with a slow-script run."""
    candidate = resolve_candidate(chapter, variant, submission)
    ev = Evaluation(chapter, candidate, device or default_device(), trace_tool, with_ncu, keep_traces, progress,
                    only=only, bank=bank)
    try:
        return ev.run_checks(str(submission) if submission else variant, only=only)
    finally:
        if not keep:
            ev.cleanup()
