"""What a check may read: one frozen object the grader fills in before the first check runs.

The grader (checker.grader) makes the runs its plan asks for, reads their traces, has the referee judge the
weights, and hands the checks an ``Evidence``. A check reads nothing else: no file, no process, no clock.

A run here is the grader's record of one process (``checker.grader.runs.RunResult``): its window and step
times on the grader's clock, the processes the grader saw under it, what the run reported (untrusted), its
trace file and phases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping


class TraceMismatch(Exception):
    """A trace that does not show the run the grader stamped: the checks that read it fail."""


def rank_traces(evidence, role: str = "candidate") -> list:
    """Every rank's trace of the traced job, rank 0 first; a trace that does not line up raises TraceMismatch."""
    run = evidence.candidate_run if role == "candidate" else evidence.traced[0]
    world = max(len(getattr(run, "ranks", None) or ()), 1)  # no run (a trace checked alone): one process
    found = [evidence.trace(role)]
    for rank in range(1, world):
        name = f"{role}.rank{rank}"
        if name not in evidence.traces:
            raise TraceMismatch(f"rank {rank} of the job left no trace")
        found.append(evidence.trace(name))
    return found


@dataclass(frozen=True)
class Speed:
    """The timed pairs' speed, as the grader's clock measured it."""

    ratios: tuple[float, ...]             # baseline window / candidate window, per timed candidate run
    baseline_windows: tuple[float, ...]   # the windows compared with (the pairs', or a grading worker's shared ones)
    candidate_windows: tuple[float, ...]
    samples: int                          # the slow script's samples per window
    shared: str | None = None             # how a grading worker shares the slow script's speed, when it does


@dataclass(frozen=True)
class NcuTarget:
    """What a check asks Nsight Compute to profile in the candidate's run: a kernel, in one step."""

    kernel_regex: str
    step: int
    sections: tuple[str, ...]
    metrics: tuple[str, ...] = ()
    shown: str = ""                  # the kernel's name as a person reads it
    details: Mapping[str, Any] = field(default_factory=dict)  # what the check wants back about its choice
    skipped: str | None = None       # a hotter kernel it had to pass over, and why, as a person reads it
    problem: str | None = None       # set instead: why nothing can be profiled (the check fails with it)


@dataclass(frozen=True)
class NcuOutcome:
    """What Nsight Compute gave back for a target: its raw CSV page, or why it could not profile."""

    target: NcuTarget
    csv: str = ""                           # `ncu --import <report> --csv --page raw --print-units base`
    copy_bytes_per_s: float | None = None   # the device-to-device copy bandwidth probed on this GPU
    skip: str | None = None                 # ncu could not profile on this machine at all
    failure: str | None = None              # it could, but did not (exit code, no report, no matching kernel)
    command: str = ""


@dataclass(frozen=True)
class JobRun:
    """One mystery job as the grader ran it: its code (from the grader's own draw), the wall its sizes were
    drawn for, and its trace (or the TraceMismatch saying why the trace is not believed)."""

    code: int
    design: str
    trace: Any                        # TraceAnalysis or TraceMismatch
    step_ms: tuple[float, ...] = ()   # the grader's clock, per traced step
    matmuls: frozenset = frozenset()  # the job's matrix multiplies, (m, k, n) each: its sizes, as a trace shows them


@dataclass(frozen=True)
class Diagnosis:
    """What a diagnosis is graded on: the learner's assignment as the grader drew it, its jobs as the grader
    measured them, and the answer file as read (data, never run)."""

    learner: str
    secret_kind: str                          # "course" or "practice"
    jobs: Mapping[str, JobRun]
    answer: Mapping[str, Any] | None          # the parsed answer file; None when it could not be read
    answer_problem: str | None = None         # why it could not be read
    fix_job: str | None = None                # the job the candidate's script was run (and timed) as
    shown: Mapping[str, Any] = field(default_factory=dict)  # job -> the learner's trace it names, or why none


def own_native_code(native) -> str:
    """How a run's shared objects of its own are named in a check's evidence (the harness's native_code_of_its_own)."""
    return (f"{len(native)} shared object(s) loaded from outside Python's installation ({', '.join(native[:2])}): "
            "native code of the script's own (a C extension, a library for ctypes, or torch.compile's C++ wrapper of "
            "a graph, cpp_wrapper or AOTInductor, which runs ATen's kernels around the dispatcher that records ops)")


def slow_cpu_pairs(evidence) -> list[tuple[Any, Any]]:
    """The pairs with the slow script on their baseline side whose runs both have the kernel's CPU count over their
    window (``RunResult.window_cpu_ns``, CPU runs): what a CPU-time rule pools, since one pair moves with the machine."""
    slow = evidence.chapter.slow_script
    return [(b, c) for b, c in evidence.pairs if b is not None and b.script == slow and b.window_cpu_ns is not None
            and c is not None and c.window_cpu_ns is not None]


def cpu_per_step(runs, which: int | None = 0) -> float:
    """ns of CPU per window step over ``runs``: their own process's (``which`` 0), every other under it's (1), or
    both (None)."""
    used = sum(sum(run.window_cpu_ns) if which is None else run.window_cpu_ns[which] for run in runs)
    return used / sum(max(len(run.step_ms), 1) for run in runs)


def pairs_of(timed, traced) -> tuple[tuple[Any, Any], ...]:
    """Every pair whose work is judged: the timed pairs, then the traced pair unless it is one of them (a traced
    tail: the first timed pair, traced after its windows)."""
    own = traced is not None and not any(pair is traced for pair in timed)
    return tuple(timed) + ((traced,) if own else ())


@dataclass(frozen=True)
class Evidence:
    """Everything the grader measured of one candidate, for the checks to judge."""

    chapter: Any                      # checker.base.chapters.Chapter
    device: str
    trace_tool: str
    candidate: Path                   # the graded script, as the learner knows it
    cfg: Mapping[str, Any]
    timed: tuple[tuple[Any, Any], ...] = ()   # (baseline, candidate) runs timed side by side
    traced: tuple[Any, Any] | None = None     # the traced pair: the candidate traced, its baseline traced when needed
    speed: Speed | None = None
    verdicts: Mapping[int, dict] = field(default_factory=dict)  # the referee's, by index into ``pairs``
    traces: Mapping[str, Any] = field(default_factory=dict)     # role -> TraceAnalysis or TraceMismatch
    ncu: Mapping[str, NcuOutcome] = field(default_factory=dict)  # by check name
    reference: str = "baseline"       # what the candidate is compared with: "baseline" or "reference solution"
    diagnosis: Diagnosis | None = None  # a chapter that grades a diagnosis (chapter 08): the jobs as measured
    one_rank: Any = None              # a data-parallel candidate run as one rank of the same per-rank batch (a RunResult)

    def __post_init__(self):
        for name in ("cfg", "verdicts", "traces", "ncu"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def pairs(self) -> tuple[tuple[Any, Any], ...]:
        """Every pair whose work is judged (the referee's verdicts are indexed by it): ``pairs_of``."""
        return pairs_of(self.timed, self.traced)

    @property
    def candidate_run(self):
        """The candidate's traced run when there is one, else its first timed run."""
        if self.traced is not None:
            return self.traced[1]
        return self.timed[0][1]

    def trace(self, role: str = "candidate"):
        """The candidate's (or the baseline's) steady-state steps as traced, checked against the grader's stamps;
        a trace that does not line up raises TraceMismatch."""
        found = self.traces[role]
        if isinstance(found, TraceMismatch):
            raise found
        return found

    def is_log_step(self, step: int) -> bool:
        log_every = int(self.cfg.get("log_every", 0))
        return bool(log_every) and (step + 1) % log_every == 0
