"""The evidence stage: what the checks judge, gathered from the runs a check made (checker.grader.pairs) and frozen
into one Evidence: the traces the grader believes (each must line up with the steps it stamped,
checker.grader.collect), the referee's verdicts on every pair's weights, Nsight Compute's measurements, and a
diagnosis chapter's jobs and answer."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from checker import checks
from checker.checks.evidence import Diagnosis, Evidence, JobRun, TraceMismatch
from checker.grader.assignment import Drawn
from checker.grader.collect import ask_referee, trace_problem
from checker.grader.ncu import profile_kernel
from checker.grader.pairs import Made, Runner
from checker.grader.plan import Plan
from checker.grader.runs import RunResult


class _Traces:
    """Loads a run's trace for a role (candidate, baseline, a rank's, a job's), kept under ``keep`` when asked."""

    def __init__(self, runner: Runner, tool: str, keep: Path | None, excuse_data_wait: bool):
        self.runner, self.tool, self.keep, self.excuse_data_wait = runner, tool, keep, excuse_data_wait
        self.warmups: dict[str, object] = {}  # role -> the whole trace, warm-up steps included (``trace_warmup``)

    def load(self, role: str, run: RunResult, keep: bool = True):
        """A run's trace when it lines up with the steps the grader stamped, else the TraceMismatch that says why.
        ``keep``: False for a trace that is the grader's own reference (an assigned job's: a diagnosis must rest on
        the learner's own traces, so the grader's are never handed out)."""
        from checker.trace.analysis import load, load_after_warmup

        chapter, cfg, trace_file = self.runner.chapter, self.runner.cfg, run.trace_file
        if self.keep is not None and trace_file is not None and keep:
            self.keep.mkdir(parents=True, exist_ok=True)
            suffix = "".join(trace_file.suffixes[-2:]) if trace_file.name.endswith(".gz") else trace_file.suffix
            shutil.copy(trace_file, self.keep / f"{chapter.id}-{role}-{self.tool}{suffix}")
        began = time.perf_counter()
        first = run.trace_first_step if run.trace_first_step is not None else int(cfg["warmup"])
        if cfg.get("trace_warmup") and self.tool == "torch" and first == int(cfg["warmup"]):
            # the harness traced the warm-up too: the window's rules read the window, step_work the warm-up as well
            trace, whole = load_after_warmup(trace_file, first)
            if whole is not None:
                self.warmups[role] = whole
        else:
            trace = load(trace_file)
        self.runner.timing("parse", f"{role}'s trace", began)
        # a run traced over its window records every window step; a traced pair or tail, trace_steps of them
        count = run.steps - first if run.steps and first < run.steps else int(cfg.get("trace_steps", 10))
        problem = trace_problem(trace, run, first, count, self.runner.device, excuse_data_wait=self.excuse_data_wait)
        return TraceMismatch(f"the {role}'s trace {problem}") if problem else trace


def gather(runner: Runner, made: Made, plan: Plan, tool: str, *, reference: str, drawn: Drawn | None = None,
           keep_traces: Path | None = None, pair_cfg: dict | None = None) -> Evidence:
    """The evidence the checks judge, frozen. ``reference``: what the candidate's pairs were trained beside, as the
    report names it; ``keep_traces``: where to copy each trace a check read (--keep-traces)."""
    chapter, device = runner.chapter, runner.device
    # a chapter about loading data: a CPU trace's time spent waiting for a batch is the lesson, not hidden work
    loads_data = any(checks.KINDS[c.name].data_wait_is_work for c in chapter.checks)
    loader = _Traces(runner, tool, keep_traces, loads_data)
    traces = {}
    if made.traced is not None:
        b, c = made.traced
        traces["candidate"] = loader.load("candidate", c)
        if b.trace_file is not None:
            traces["baseline"] = loader.load("baseline", b)
        for role, whole in loader.warmups.items():  # the warm-up's steps, where the chapter judges them
            if not isinstance(traces.get(role), TraceMismatch):
                traces[f"{role}.warmup"] = whole
        for role, job in (("candidate", c), ("baseline", b)):  # a job of several ranks: every rank's trace
            for rank, run in enumerate(job.ranks[1:], start=1):
                if run.trace_file is not None:
                    traces[f"{role}.rank{rank}"] = loader.load(f"{role}.rank{rank}", run)
    verdicts = {}
    if plan.referee:
        runner.say("referee: the trained weights, in a fresh process")
        began = time.perf_counter()
        pairs = made.pairs()
        verdicts = ask_referee(chapter, device, pairs, runner.workdir, cfg=pair_cfg or {})
        runner.timing("referee", f"{len(pairs)} pairs' weights", began)
    ncu = {}
    for name in plan.ncu:
        found = traces.get("candidate")
        if found is None or isinstance(found, TraceMismatch):
            continue  # the check fails on the trace itself
        target = checks.KINDS[name].ncu_target(found, chapter.check(name), runner.cfg)
        began = time.perf_counter()
        ncu[name] = profile_kernel(runner, target)
        runner.timing("ncu", f"Nsight Compute for {name}", began)
    return Evidence(
        chapter=chapter, device=device, trace_tool=tool, candidate=runner.candidate, cfg=runner.cfg,
        timed=tuple(made.timed), traced=made.traced, speed=made.speed() if made.timed else None, verdicts=verdicts,
        traces=traces, ncu=ncu, reference=reference, diagnosis=_diagnosis(runner, made, drawn, loader),
        one_rank=made.one_rank,
    )


def _diagnosis(runner: Runner, made: Made, drawn: Drawn | None, loader: _Traces) -> Diagnosis | None:
    if drawn is None:
        return None
    from checker.base.workloads import load_workload_module

    shapes_of = load_workload_module(runner.chapter.dir).job_matmuls  # how a trace is recognized as one job's
    assignment = drawn.assignment
    jobs = {job: JobRun(code=assignment.codes[job], design=assignment.designs[job],
                        trace=loader.load(f"job-{job}", run, keep=False), step_ms=tuple(run.step_ms),
                        matmuls=shapes_of(assignment.codes[job], runner.device))
            for job, run in made.jobs.items()}
    return Diagnosis(learner=assignment.learner, secret_kind=assignment.secret_kind, jobs=jobs, answer=drawn.answer,
                     answer_problem=drawn.answer_problem, fix_job=drawn.fix_job, shown=drawn.shown)
