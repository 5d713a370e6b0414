"""Grade one candidate script of one chapter on one device: ``evaluate``, the one way from a submission to a verdict.

A check goes through four stages, each a module of its own taking what it needs and returning a value:

1. the plan (checker.grader.plan): which runs the chapter's checks need on this device, from what each declares;
   a diagnosis chapter's jobs and answer are drawn here too (checker.grader.assignment.draw_for);
2. the runs (checker.grader.pairs.make_runs): baseline and candidate in pairs under one secret, each in a
   private, isolated process;
3. the evidence (checker.grader.gather.gather): the traces the grader believes, the referee's verdicts and
   Nsight Compute's measurements, frozen into one Evidence;
4. the judgement (checker.checks.judge): the checks, pure functions of that evidence.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from checker.base.chapters import TRACE_TOOLS, Chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path
from checker.base.tools import require_tool
from checker.checks.evidence import Evidence
from checker.checks.judge import judge
from checker.grader import assignment, compile_cache, forkserver, sandbox
from checker.grader.baseline import BaselineBank
from checker.grader.gather import gather
from checker.grader.pairs import Made, Runner, make_runs, reference_script
from checker.grader.plan import make_plan
from checker.grader.precheck import candidate_paths, check_candidate, resolve_candidate
from checker.grader.report import Report
from checker.grader.runs import IncompleteWork
from checker.base.scan import refuse_probes, scan_flags



def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_device() -> str:
    return "cuda" if cuda_available() else "cpu"


def refuse_trace_tool(chapter: Chapter, trace_tool: str, device: str | None) -> None:
    """A trace tool this chapter or device cannot be graded with: one line (a WorkbookError). ``device`` None: not
    chosen yet (class grading picks it later)."""
    if trace_tool not in TRACE_TOOLS:
        raise WorkbookError(f"--trace-tool {trace_tool}: choose torch or nsys")
    if trace_tool in chapter.not_graded_with:  # on any machine: no GPU would change it
        raise WorkbookError(f"chapter {chapter.number:02d} is graded from torch.profiler's traces only: "
                            f"{chapter.not_graded_with[trace_tool]}. Check with --trace-tool torch (the default); "
                            f"`workbook profile {chapter.number:02d} --tool {trace_tool}` shows the job in {trace_tool}")
    if trace_tool == "nsys":
        if device == "cpu":
            raise WorkbookError("--trace-tool nsys traces CUDA work; use it with --device cuda, or use --trace-tool torch")
        require_tool("nsys", "--trace-tool nsys", "use --trace-tool torch")


def _refuse_setting(chapter: Chapter, device: str, trace_tool: str, candidate: Path) -> None:
    """A device, tool or file this check cannot use: one line (a WorkbookError), before anything runs."""
    refuse_trace_tool(chapter, trace_tool, None if device not in ("cpu", "cuda") else device)
    if device not in ("cpu", "cuda"):
        raise WorkbookError(f"--device {device}: choose cpu or cuda")
    if device == "cuda" and not cuda_available():
        raise WorkbookError("--device cuda: this machine has no CUDA GPU that torch can use; try --device cpu")
    if not candidate.is_file():
        raise WorkbookError(f"{candidate}: no such file")
    refuse_probes(candidate, display_path(candidate), **scan_flags(spec.name for spec in chapter.checks))


def _compile_store(chapter: Chapter, candidate: Path, device: str, workdir: Path, shared: bool):
    """torch.compile's caches of the candidate's runs (checker.grader.compile_cache), held for this check: under the
    state folder for the next `workbook check` of the same script, only for this check in class grading. Only a
    chapter whose scripts compile gets one (chapter.toml's compile_cache): a store that outlives a run is a place to
    keep anything for the next run, a measured report among it."""
    if not compile_cache.enabled() or not chapter.raw.get("compile_cache"):
        return None
    if shared:
        store = workdir / "compile-store"
        store.mkdir(exist_ok=True)
    else:
        store = compile_cache.store_for(chapter.id, candidate, device)
    return compile_cache.claim(store) if store is not None else None


class Evaluation:
    """One candidate's check, from its plan to its report. It holds what the stages share: the check's folder, its
    runner (timings, notes), the compile cache's claim and a diagnosis chapter's drawn jobs."""

    def __init__(self, chapter: Chapter, candidate: Path, device: str, trace_tool: str = "torch", with_ncu: bool = False,
                 keep_traces: Path | None = None, progress=None, only: set[str] | None = None,
                 bank: BaselineBank | None = None, learner: str | None = None):
        _refuse_setting(chapter, device, trace_tool, candidate)
        self.chapter, self.candidate, self.device, self.trace_tool = chapter, candidate, device, trace_tool
        self.keep_traces, self.bank = keep_traces, bank
        self.plan = make_plan(chapter, device, only, with_ncu, trace_tool)
        began = time.perf_counter()
        workdir = sandbox.check_folder()
        self.runner = Runner(chapter, candidate, device, workdir, progress=progress,
                             notes=[f"isolation: each run {sandbox.isolation()[1]}"])
        self.runner.timing("probe", "who can run the candidate (an unprivileged user's interpreter)", began)
        try:  # a chapter that grades a diagnosis (chapter 08): the learner's jobs, drawn from the grader's secret
            self.drawn = assignment.draw_for(chapter, candidate, device, learner) if chapter.raw.get("answer_file") \
                else None
        except WorkbookError:  # an answer that is not TOML: refused before any run, leaving no folder behind
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        if self.drawn is not None:
            self.runner.notes.extend(self.drawn.notes)
            self.runner.pair_args = self.drawn.pair_args
        self.reference = reference_script(chapter, self.plan, bank, self.drawn is not None, self.runner.notes)
        self.runner.compile_store = _compile_store(chapter, candidate, device, workdir, shared=bank is not None)
        self.made: Made | None = None  # the runs of the last run_checks, for a caller to inspect

    @property
    def notes(self) -> list[str]:
        return self.runner.notes

    @property
    def workdir(self) -> Path:
        return self.runner.workdir

    @property
    def pair_cfg(self) -> dict | None:
        return self.drawn.pair_cfg if self.drawn is not None else None

    def make_runs(self) -> Made:
        """Stage 2: every run the plan asks for."""
        self.made = make_runs(self.runner, self.plan, self.trace_tool, self.reference, self.bank,
                              jobs=self.drawn.assignment.codes if self.drawn is not None and self.plan.jobs else None,
                              pair_cfg=self.pair_cfg)
        return self.made

    def gather(self, made: Made) -> Evidence:
        """Stage 3: the evidence of those runs, frozen."""
        return gather(self.runner, made, self.plan, self.trace_tool, drawn=self.drawn, keep_traces=self.keep_traces,
                      reference="reference solution" if made.bank is not None else "baseline", pair_cfg=self.pair_cfg)

    def run_checks(self, variant_label: str) -> Report:
        """Plan, runs, evidence, checks; the checks the plan left out are reported as skipped."""
        started = time.perf_counter()
        if (folder := sandbox.scratch_on_import_path()) is not None:
            raise WorkbookError(
                f"Python imports from {folder} here (a script there, or PYTHONPATH), where the grader's runs write "
                "their files: no verdict could be trusted. Run it from a script outside that folder, or take it "
                "off PYTHONPATH")
        trusted = sandbox.TrustedFiles(sandbox.trusted_folders())  # what they hold now, to compare at the end
        wrote_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # the grader changes no file either
        try:
            incomplete: IncompleteWork | None = None
            evidence = None
            try:
                made = self.make_runs()
            except IncompleteWork as err:
                incomplete = err
            if incomplete is None:
                evidence = self.gather(made)
            results = judge(self.chapter, self.plan.skipped, evidence, incomplete, self.device)
        finally:
            sys.dont_write_bytecode = wrote_bytecode
        began = time.perf_counter()
        changed = trusted.changed()
        self.runner.timing("tamper", "the grader's files unchanged", began)
        if changed:
            raise WorkbookError(
                f"files the grader relies on changed while {display_path(self.candidate)} was graded "
                f"({', '.join(changed)}): the verdict is withheld. Restore them (git checkout, or reinstall the "
                "package) and check again")
        return Report(
            chapter=self.chapter.id, variant=variant_label, candidate=str(self.candidate), device=self.device,
            trace_tool=self.trace_tool, checks=results, wall_s=time.perf_counter() - started, notes=self.notes,
            timings=self.runner.timings,
        )

    def release(self) -> None:
        """Let go of what the check held besides its folder (the compile cache's claim)."""
        if self.runner.compile_store is not None:
            self.runner.compile_store.release()

    def cleanup(self) -> None:
        self.release()
        shutil.rmtree(self.workdir, ignore_errors=True)


def evaluate(chapter: Chapter, *, variant: str = "lab", submission: Path | None = None, device: str | None = None,
             trace_tool: str = "torch", with_ncu: bool = False, keep: bool = False,
             keep_traces: Path | None = None, only: set[str] | None = None, progress=None,
             bank: BaselineBank | None = None, learner: str | None = None) -> Report:
    """The one way from a submission to a verdict: `workbook check`, the pytest plugin and class grading all call
    this. It finds the script (a variant of the chapter, or the lab file in a ``submission`` folder), refuses one
    that does not compile or starts another chapter's workload before anything runs (checker.grader.precheck),
    starts the fork server, and grades it. ``bank``: the slow script's speed shared by a grading worker's students
    (see checker.grader.baseline); without it, every candidate run is paired with a slow-script run.
    ``learner``: class grading's learner id (the submission folder's name), whose jobs chapter 08 draws."""
    candidate = resolve_candidate(chapter, variant, submission)
    check_candidate(candidate, chapter.id)  # refused in about a second, before any process starts
    forkserver.prestart()  # its imports of torch overlap the plan and what comes before the first run
    ev = Evaluation(chapter, candidate, device or default_device(), trace_tool, with_ncu, keep_traces, progress,
                    only=only, bank=bank, learner=learner)
    if submission is not None:
        ignored = [path for path in candidate_paths(chapter, Path(submission).expanduser().resolve())
                   if path.is_file() and path != candidate]
        if ignored:
            ev.notes.append(f"graded {display_path(candidate)}; also handed in and not graded: "
                            + ", ".join(display_path(path) for path in ignored))
    try:
        return ev.run_checks(str(submission) if submission else variant)
    finally:
        ev.release()
        if not keep:
            ev.cleanup()
