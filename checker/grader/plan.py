"""The plan: which runs a chapter's checks need on this device, computed from what each check declares.

No check is named here. A check that is skipped on this device (chapter.toml's ``skip``), left out by
``--only``, or has no threshold here needs nothing; the others' ``needs`` (checker.checks) decide:

* timed pairs, when a check needs TIMED (or TIMED_CPU, on a CPU): the slow script (or a grading worker's
  reference) and the candidate, untraced, taking turns, until the timed checks are settled (one pair for a clear
  verdict) or ``trials`` pairs were made, and at least ``min_trials``;
* the traced pair, when a check needs the candidate's run or trace, or the referee has only it to judge
  (speed is not graded here): the candidate traced with the chosen tool, its baseline traced too when a
  check needs BASELINE_TRACE. Where the chapter sets ``traced_tail`` for the device, speed is graded and the
  tool is torch.profiler, the first timed pair is the traced pair: its runs go on for ``trace_steps`` traced
  steps after their windows (the weights and the clock already in), so no process of their own is started,
  warmed up and compiled for the traces. Where the chapter sets ``trace_window`` instead, every timed run (the
  baseline's too) is traced over its window and the first timed pair is the traced pair: what the trace shows is
  the timed window itself, in runs the script cannot tell apart;
* the referee, when a check needs VERDICTS: every pair's weights, in a fresh process;
* Nsight Compute, when a check needs NCU and ``--with-ncu`` asked for it (it takes minutes);
* a traced run of every job of the learner's assignment, the chapter's own slow script with each job's code
  as the grader drew it, when a check needs JOBS (a diagnosis, chapter 08).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from checker import checks
from checker.base.chapters import Chapter
from checker.base.errors import WorkbookError
from checker.checks import (BASELINE_TRACE, BASELINE_TRACE_CPU, JOBS, NCU, NOT_SELECTED, RUN, TIMED, TIMED_CPU, TRACE,
                            VERDICTS)


@dataclass(frozen=True)
class Plan:
    selected: tuple[str, ...]           # the checks that run here, in the chapter's order
    skipped: dict[str, str] = field(default_factory=dict)  # the others: name -> why
    trials: int = 0                     # timed pairs; 0 where no check grades speed here
    traced: bool = False                # the traced pair
    trace_baseline: bool = False        # its baseline traced too
    slow_trace: bool = False            # ... and that baseline must be the slow script (a check compares with it)
    referee: bool = False
    ncu: tuple[str, ...] = ()           # the checks whose NCU target is profiled
    timed_checks: tuple[str, ...] = ()  # the checks that read the timed pairs (they say when there are enough)
    jobs: bool = False                  # every job of the learner's assignment, traced by the grader (chapter 08)
    tail: int = 0                       # > 0: the first timed pair is the traced pair, this many steps traced after
    window: bool = False                # every timed run traced over its window; the first timed pair is the traced pair
    one_rank: bool = False              # a data-parallel job's candidate also run as one rank (scaling efficiency)

    @property
    def timed(self) -> bool:
        return self.trials > 0

    def describe(self) -> str:
        parts = []
        if self.trials:
            parts.append(f"{self.trials} timed pair(s)")
        if self.traced and self.window:
            parts.append("every timed run traced over its window (the first pair's traces read)")
        elif self.traced and self.tail:
            parts.append(f"the first pair traced for {self.tail} steps after its windows"
                         + (" (both runs)" if self.trace_baseline else " (the candidate's run)"))
        elif self.traced:
            parts.append("a traced pair" + (" (both traced)" if self.trace_baseline else ""))
        if self.referee:
            parts.append("the referee")
        if self.ncu:
            parts.append("Nsight Compute")
        if self.jobs:
            parts.append("a traced run of every assigned job")
        if self.one_rank:
            parts.append("one run of a single rank")
        return ", ".join(parts) or "no runs"


def static_skip(chapter: Chapter, spec, device: str, only: set[str] | None) -> str | None:
    """Why ``spec`` cannot run on ``device`` whatever the runs show, or None."""
    skip = spec.skip_reason_for(device)
    if skip is None and only and spec.name not in only:
        skip = f"{NOT_SELECTED} (--only {','.join(sorted(only))})"
    if skip is None and spec.threshold_for(device) is None and checks.KINDS[spec.name].thresholded:
        skip = f"no threshold for {device} in {chapter.id}/chapter.toml"
    return skip


def make_plan(chapter: Chapter, device: str, only: set[str] | None = None, with_ncu: bool = False,
              trace_tool: str = "torch") -> Plan:
    declared = [spec.name for spec in chapter.checks]
    for name in declared:
        if name not in checks.KINDS:
            raise WorkbookError(f"{chapter.id}/chapter.toml declares an unknown check '{name}'; "
                                f"known: {', '.join(sorted(checks.KINDS))}")
    if only:
        unknown = sorted(set(only) - set(declared))
        if unknown:
            raise WorkbookError(f"--only {','.join(unknown)}: {chapter.id} has no such check; "
                                f"its checks: {', '.join(declared)}")
    skipped = {spec.name: why for spec in chapter.checks
               if (why := static_skip(chapter, spec, device, only)) is not None}
    selected = tuple(name for name in declared if name not in skipped)
    needs = {name: checks.KINDS[name].needs for name in selected}
    wanted = set().union(*needs.values()) if needs else set()
    timed = TIMED in wanted or (device == "cpu" and TIMED_CPU in wanted)
    trials = int(chapter.config(device).get("trials", 3)) if timed else 0
    # the traced pair: for what only a traced run shows, or as the one pair the referee judges
    traced = bool(wanted & {RUN, TRACE, BASELINE_TRACE, NCU}) or (VERDICTS in wanted and not trials)
    trace_baseline = BASELINE_TRACE in wanted or (device == "cpu" and BASELINE_TRACE_CPU in wanted)
    ncu = tuple(name for name in selected if NCU in needs[name]) if with_ncu and device == "cuda" else ()
    cfg = chapter.config(device)
    tail = int(cfg.get("trace_steps", 10)) if traced and trials and trace_tool == "torch" and cfg.get("traced_tail") else 0
    # trace_window: the timed window itself is what the trace records, in every timed run (candidate and baseline
    # alike, so the clock compares like with like): a script cannot keep a pattern where no trace looks
    window = bool(traced and trials and trace_tool == "torch" and cfg.get("trace_window"))
    if window:
        tail = 0
    if os.environ.get("WORKBOOK_TRACED_TAIL") == "0":  # the grader's own switch: a traced pair of its own (an A/B)
        tail = 0
    return Plan(selected=selected, skipped=skipped, trials=trials, traced=traced,
                trace_baseline=trace_baseline, slow_trace=BASELINE_TRACE in wanted, referee=VERDICTS in wanted, ncu=ncu,
                timed_checks=tuple(name for name in selected if TIMED in needs[name]), jobs=JOBS in wanted, tail=tail,
                window=window, one_rank=bool(trials) and int(cfg.get("world_size", 1)) > 1)
