"""The runs stage: every run a check's plan asks for (checker.grader.plan), made in pairs under one secret.

Every run trains under a fresh secret (seed and window key, see checker.base.workloads). Runs come in pairs, a
baseline and a candidate run under the same secret, so that the referee can compare their weights:

* the timed pairs (only where this device grades speed): untraced, alternating which runs first;
* the traced pair: the candidate traced with the chosen tool, its baseline traced too when a check compares
  counts with the baseline's trace. Where speed is not graded it is the only pair, so the run whose trace is read
  is also the run whose work is checked: a script cannot behave one way when traced and another way when it is
  not. Where the plan has a traced tail (``traced_tail``), the traced pair is the first timed pair, traced for
  ``trace_steps`` steps after its windows; where it traces the window, every timed run is traced;
* the assigned jobs (a diagnosis, chapter 08): the chapter's own slow script with each job's code, traced.

``Runner`` runs one script (its own private folder, checker.grader.runs; a job of several ranks,
checker.grader.ranks) and keeps the check's timings and notes; Nsight Compute asks it for its runs too.
``make_runs`` returns what was made, a ``Made``.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from checker import checks
from checker.base.chapters import Chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path
from checker.checks.evidence import Speed, pairs_of
from checker.grader import forkserver, ranks
from checker.grader.baseline import BaselineBank
from checker.grader.collect import ask_referee
from checker.grader.plan import Plan
from checker.grader.runs import IncompleteWork, RunResult, ScriptError, describe_phases, new_secret, run_script

Pair = tuple[RunResult, RunResult]  # (baseline, candidate), one secret


def traced_steps(cfg) -> int:
    """Steps of a traced run: the warm-up, then the traced steps."""
    return int(cfg["warmup"]) + int(cfg.get("trace_steps", 10))


@dataclass
class Runner:
    """Runs scripts for one check of ``candidate``: the candidate's own runs get its compile cache, both runs of a
    pair get ``pair_args`` (the job a fix is for). Each run's phases go to ``timings``, what a learner should know
    to ``notes``, and a line before each run to ``progress``."""

    chapter: Chapter
    candidate: Path
    device: str
    workdir: Path
    compile_store: Any = None  # checker.grader.compile_cache.Claim
    pair_args: list[str] = field(default_factory=list)
    progress: Callable[[str], None] | None = None
    notes: list[str] = field(default_factory=list)
    timings: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    cfg: dict = field(default_factory=dict)  # the chapter's settings on this device

    def __post_init__(self):
        self.cfg = self.cfg or self.chapter.config(self.device)

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def timing(self, kind: str, what: str, began: float, **extra) -> None:
        self.timings.append({"kind": kind, "what": what, "start_s": round(began - self.started, 2),
                             "wall_s": round(time.perf_counter() - began, 2), **extra})

    def run(self, script: Path, what: str, secret: tuple[int, int], world: int | None = None, **kwargs) -> RunResult:
        """One run of ``script``; a data-parallel chapter's is a job of the chapter's ranks, or of ``world``."""
        shown = display_path(script)
        self.say(f"{what}: {shown}")
        seed, key = secret
        began = time.perf_counter()
        world = ranks.world_size(self.cfg) if world is None else world
        if script == self.candidate and self.compile_store is not None:
            kwargs["compile_cache"] = self.compile_store  # the candidate's own runs only (ranks.run_job: cold)
        if self.pair_args and "extra_args" not in kwargs:
            kwargs["extra_args"] = list(self.pair_args)  # the job the fix is for, in both runs of a pair
        if world > 1 or ranks.world_size(self.cfg) > 1:  # a data-parallel chapter: a job of ranks, each a run
            run = ranks.run_job(self.chapter, script, self.device, world=world, workdir=self.workdir, seed=seed,
                                window_key=key, display=shown, **kwargs)
        else:
            run = run_script(self.chapter, script, self.device, workdir=self.workdir, seed=seed, window_key=key,
                             display=shown, **kwargs)
        self.timing("run", what, began, script=shown, trace=kwargs.get("trace") or kwargs.get("profiler") and "ncu",
                    compile_cache="compile_cache" in kwargs and world == 1, phases=run.phases_s, forked=getattr(run, "forked", False))
        refused = forkserver.refused()
        if refused and not any(note.startswith("fork server") for note in self.notes):
            self.notes.append(f"fork server not used, each run imported torch itself: {refused}")
        self.say(f"  {sum(run.phases_s.values()):.1f} s: {describe_phases(run.phases_s)}")
        if run.survivors:
            left = "1 process" if run.survivors == 1 else f"{run.survivors} processes"
            self.notes.append(f"{shown} left {left} running after it finished; the grader killed them")
        return run


@dataclass
class Made:
    """The runs a check made: what the evidence stage reads."""

    timed: list[Pair] = field(default_factory=list)
    traced: Pair | None = None
    jobs: dict[str, RunResult] = field(default_factory=dict)  # an assigned job's traced run, by job
    one_rank: RunResult | None = None  # a data-parallel candidate run as one rank of the same per-rank batch
    bank: BaselineBank | None = None  # where the timed pairs' baseline speed is a grading worker's

    def pairs(self) -> list[Pair]:
        """Every pair, in the order the evidence indexes the referee's verdicts (whatever the candidate ran, its
        work is checked)."""
        return list(pairs_of(self.timed, self.traced))

    def speed(self) -> Speed:
        return speed_of(self.timed, self.bank)


def speed_of(pairs, bank: BaselineBank | None) -> Speed:
    """The timed pairs' speed: each candidate window against its own pair's baseline, or, when a grading worker
    shares the slow script's speed (``bank``), against the median of its latest baseline windows."""
    candidate = tuple(c.window_s for _, c in pairs)
    if bank is not None:
        recent = bank.recent(len(pairs))
        baseline = tuple(w["window_s"] for w in recent)
        middle = statistics.median(baseline)
        return Speed(tuple(middle / c for c in candidate), baseline, candidate, int(recent[-1]["samples"]),
                     shared=bank.summary())
    baseline = tuple(b.window_s for b, _ in pairs)
    return Speed(tuple(b / c for b, c in zip(baseline, candidate)), baseline, candidate, pairs[0][0].samples)


def reference_script(chapter: Chapter, plan: Plan, bank: BaselineBank | None, assigned: bool,
                     notes: list[str]) -> Path:
    """The script trained beside each candidate run, under its secret: the slow script, unless a grading worker
    shares the slow script's speed (a BaselineBank), where the chapter's reference solution does the same work in
    less time. Chapters whose checks read the slow script's trace keep the slow script, as do assigned jobs."""
    slow = chapter.slow_script
    if bank is None:
        return slow
    if assigned:
        notes.append("baseline: each student's runs are paired with the slow script's: each student's fix "
                     "runs as a job of their own, whose speed no other student shares")
        return slow
    # a check that only counts what the baseline's optimizer reads (host_syncs on a CPU) reads it in the reference
    # solution's trace as well: the solution steps the slow script's optimizer
    if plan.slow_trace:
        notes.append("baseline: each student's runs are paired with the slow script's: "
                     f"{chapter.id}'s checks compare counts with its trace")
        return slow
    solution = chapter.solution_script
    if not solution.is_file():
        notes.append(f"baseline: each student's runs are paired with the slow script's: there is no "
                     f"reference solution ({display_path(solution)}) to train beside them")
        return slow
    return solution


class _Maker:
    """make_runs' state: the runner, the plan, the script beside the candidate and the bank it is checked with."""

    def __init__(self, runner: Runner, plan: Plan, tool: str, reference: Path, bank: BaselineBank | None,
                 jobs: dict[str, int], pair_cfg: dict):
        self.runner, self.plan, self.tool, self.reference = runner, plan, tool, reference
        self.jobs, self.pair_cfg = jobs, pair_cfg
        self.cfg = runner.cfg
        self.uses_bank = bank is not None and reference != runner.chapter.slow_script
        self.bank = bank if self.uses_bank else None
        self.label = "reference solution" if self.uses_bank else "baseline"
        self.made = Made(bank=self.bank)

    def make(self) -> Made:
        if self.plan.timed:
            self.timed_runs(self.plan.trials)
        if self.plan.traced and self.made.traced is None:
            self.traced_runs()
        if self.plan.jobs:
            self.job_runs()
        if self.plan.one_rank:
            self.one_rank_run()
        return self.made

    def one_rank_run(self) -> None:
        """The candidate as a job of one rank, its global batch one rank's share of the chapter's: what its ranks
        would reach with nothing to share, for the scaling efficiency the speed is reported with."""
        world = ranks.world_size(self.cfg)
        share = int(self.cfg["global_batch"]) // world
        try:
            self.made.one_rank = self.runner.run(self.runner.candidate, "one rank of the same per-rank batch",
                                                 new_secret(), world=1, extra_args=["--set", f"global_batch={share}"])
        except (ScriptError, IncompleteWork) as exc:  # reported beside the speed, never graded: said, not fatal
            self.runner.notes.append(f"scaling efficiency not measured: the candidate as one rank failed ({exc})")

    def job_runs(self) -> None:
        """Each job of the learner's assignment, run by the grader as the chapter's own slow script with the
        code the grader drew (never the learner's copy of the job), traced over the same steps as a traced run."""
        tool = self.tool
        for job, code in self.jobs.items():
            self.made.jobs[job] = self.runner.run(self.runner.chapter.slow_script, f"job {job}, traced ({tool})",
                                                  new_secret(), steps=traced_steps(self.cfg), trace=tool,
                                                  extra_args=["--set", f"job={code}"])

    def timed_runs(self, trials: int) -> None:
        """Timed pairs, taking turns which runs first, until every timed check is settled (at least
        ``min_trials``) or ``trials`` pairs were made: a clear verdict costs one pair, one near its threshold more."""
        run, candidate, made = self.runner.run, self.runner.candidate, self.made
        least = max(1, min(trials, int(self.cfg.get("min_trials", 1))))
        if self.uses_bank:
            self.measure_bank(trials)
        for trial in range(trials):
            what = f"timed run, trial {trial + 1} (of up to {trials})"
            secret = new_secret()
            # the first pair is the traced pair where the plan says so: traced after its windows
            tail = {"trace": "torch", "trace_tail": self.plan.tail} if self.plan.tail and trial == 0 else {}
            base_tail = tail if self.plan.trace_baseline else {}
            if self.plan.window:  # every timed run traced over its window, both sides: one clock for both
                tail = base_tail = {"trace": "torch"}
            if trial % 2 == 0:
                b = run(self.reference, what + (", then traced" if base_tail else ""), secret, **base_tail)
                c = run(candidate, what + (", then traced" if tail else ""), secret, **tail)
            else:
                every = {"trace": "torch"} if self.plan.window else {}
                c = run(candidate, what + (", traced" if every else ""), secret, **every)
                b = run(self.reference, what + (", traced" if every else ""), secret, **every)
            made.timed.append((b, c))
            if tail and made.traced is None:
                made.traced = made.timed[-1]  # the same pair: its weights are judged once
            if len(made.timed) >= least and self.settled():
                if len(made.timed) < trials:
                    self.runner.say(f"  the speed is clear after {len(made.timed)} pair(s): no more timed runs")
                break

    def settled(self) -> bool:
        """Whether every timed check says more pairs could not change its verdict."""
        speed, chapter, device = self.made.speed(), self.runner.chapter, self.runner.device
        kinds = [(checks.KINDS[name], chapter.check(name)) for name in self.plan.timed_checks]
        return all(kind.settled is not None and kind.settled(speed, spec, device) for kind, spec in kinds)

    def traced_runs(self) -> None:
        steps, tool = traced_steps(self.cfg), self.tool
        trace_baseline = self.plan.trace_baseline  # then the reference is the slow script (reference_script)
        if self.uses_bank and not self.made.timed:
            self.ensure_reference_checked()
        def pair(candidate_first: bool = False, again: str = "") -> Pair:
            secret = new_secret()
            what = f"traced run ({tool}){again}"

            def baseline() -> RunResult:
                return self.runner.run(self.reference, what if trace_baseline else f"{self.label} run{again}", secret,
                                       steps=steps, trace=tool if trace_baseline else None)

            def candidate() -> RunResult:
                return self.runner.run(self.runner.candidate, what, secret, steps=steps, trace=tool)

            if candidate_first:
                c = candidate()
                return baseline(), c
            b = baseline()
            return b, candidate()

        self.made.traced = pair()
        if (over := self.over_threshold(self.made.traced)) is not None:
            name, measure, value, threshold = over
            why = f"{name} read {value:.2f} in the traced pair (allowed up to {threshold:.2f})"
            self.runner.say(f"  {why}: the traced pair is made twice more, and the median one is read")
            pairs = [self.made.traced, pair(candidate_first=True, again=", again (2 of 3)"), pair(again=", again (3 of 3)")]
            values = [measure(p, self.runner.device) for p in pairs]
            ranked = sorted(range(len(pairs)), key=lambda i: math.inf if values[i] is None else values[i])
            chosen = ranked[len(ranked) // 2]
            shown = ", ".join("none" if v is None else f"{v:.2f}" for v in values)
            self.runner.notes.append(f"{why}; made three times, it read {shown}: pair {chosen + 1}'s traces are read")
            self.made.traced = pairs[chosen]

    def over_threshold(self, pair: Pair) -> tuple[str, Callable, float, float] | None:
        """The first selected check that judges the traced pair's speed (it declares ``traced_measure``) and reads it
        above its threshold: (name, measure, value, threshold); None where one pair settles every such check."""
        chapter, device = self.runner.chapter, self.runner.device
        for name in self.plan.selected:
            kind, spec = checks.KINDS[name], chapter.check(name)
            if kind.traced_measure is None or (threshold := spec.threshold_for(device)) is None:
                continue
            value = kind.traced_measure(pair, device)
            if value is not None and value > float(threshold):
                return name, kind.traced_measure, value, float(threshold)
        return None

    def measure_bank(self, trials: int) -> None:
        """The slow script's timed runs this worker still owes: ``trials`` of them for its first student, then
        one every few students. The first is also the one the reference solution is checked against."""
        due = self.bank.due(trials)
        for number in range(due):
            run = self.runner.run(self.runner.chapter.slow_script, f"the slow script's speed on this worker, run "
                                  f"{number + 1} of {due}", new_secret(),
                                  **({"trace": "torch"} if self.plan.window else {}))
            self.bank.add(run.window_s, run.samples)
            self.bank.runs += 1
            if self.bank.reference is None:
                self.check_reference(run)
        self.ensure_reference_checked()

    def ensure_reference_checked(self) -> None:
        bank, notes = self.bank, self.runner.notes
        if bank.reference is None:
            run = self.runner.run(self.runner.chapter.slow_script, "the slow script, to check the reference solution "
                                  "against", new_secret(), steps=traced_steps(self.cfg))
            bank.runs += 1
            self.check_reference(run)
        if not bank.reference.get("agrees"):
            raise WorkbookError(bank.reference["why"])
        if any(note.startswith("baseline:") for note in notes):
            return
        speed = bank.summary()
        notes.append(
            (f"baseline: speed compared with the slow script's on this worker ({speed}); " if speed else
             "baseline: the slow script's speed was not timed in this check; ")
            + f"work compared with the reference solution trained under the same secret, which agreed with the slow "
            f"script's work (weights {bank.reference['distance']:.3f} of its training apart)")

    def check_reference(self, slow: RunResult) -> None:
        """Train the reference solution under the slow run's secret; the referee must find the same work."""
        chapter, device = self.runner.chapter, self.runner.device
        reference = self.runner.run(self.reference, "the reference solution, under the same secret",
                                    (slow.seed, slow.window_key), steps=slow.steps or None)
        judged = ask_referee(chapter, device, [(slow, reference)], self.runner.workdir, cfg=self.pair_cfg)[0]
        kind = checks.pair_judge()  # the check that judges work, as it declares (no check is named here)
        spec = next((c for c in chapter.checks if c.name == kind.name), None)
        problems, distance = kind.pair_judge(judged, spec, device, "slow script")
        self.bank.reference = {"agrees": not problems, "distance": round(distance, 4), "problems": problems,
                               "why": (f"the reference solution {display_path(self.reference)} does not do the "
                                       f"slow script's work ({'; '.join(problems)}): no student can be judged "
                                       "against it; restore it (git checkout) and grade again")}


def make_runs(runner: Runner, plan: Plan, tool: str, reference: Path, bank: BaselineBank | None = None,
              jobs: dict[str, int] | None = None, pair_cfg: dict | None = None) -> Made:
    """Every run ``plan`` asks for, before the first check, so that the referee judges them all: the candidate's
    beside ``reference`` (checked against the slow script first where a grading worker's ``bank`` times the slow
    script), and the assigned ``jobs`` (job -> code) traced with ``tool``."""
    return _Maker(runner, plan, tool, reference, bank, jobs or {}, pair_cfg or {}).make()
