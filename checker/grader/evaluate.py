"""Grade one candidate script of one chapter on one device: run the chapter's checks, in order."""

from __future__ import annotations

import errno
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from checker import checks
from checker.base.chapters import Chapter
from checker.base.errors import WorkbookError
from checker.base.paths import display_path
from checker.base.tools import require_tool
from checker.checks.judge import judge
from checker.checks.evidence import Diagnosis, Evidence, JobRun, Speed, TraceMismatch, pairs_of
from checker.grader import assignment as assignments
from checker.grader import compile_cache, forkserver, ranks, sandbox
from checker.grader.baseline import BaselineBank
from checker.grader.collect import ask_referee, trace_problem
from checker.grader.ncu import profile_kernel
from checker.grader.plan import make_plan
from checker.grader.report import Report
from checker.grader.precheck import check_candidate
from checker.grader.runs import IncompleteWork, RunResult, describe_phases, new_secret, run_script
from checker.grader.scan import refuse_probes
from checker.grader.shown_work import read_shown

TRACE_TOOLS = ("torch", "nsys")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_device() -> str:
    return "cuda" if cuda_available() else "cpu"


def candidate_paths(chapter: Chapter, submission: Path) -> list[Path]:
    """Where a submission folder may hold the lab file, in the order the grader looks."""
    return [submission / chapter.lab_file, submission / chapter.id / chapter.lab_file,
            submission / "labs" / chapter.id / chapter.lab_file]


def resolve_candidate(chapter: Chapter, variant: str = "lab", submission: Path | None = None) -> Path:
    """The script to grade: a variant of the chapter, or the lab file inside a submission folder."""
    if submission is None:
        return chapter.script_for(variant)
    given = Path(submission).expanduser()
    try:
        submission = given.resolve()  # relative to where the command was given
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError on a symlink loop
        raise WorkbookError(f"--submission {given}: is a symlink loop and cannot be resolved; "
                            "name the folder itself") from None
    if not submission.is_dir():
        if given.is_symlink() and not submission.exists():
            raise WorkbookError(f"--submission {given}: is a symlink to {submission}, which does not exist; "
                                "name the folder itself")
        raise WorkbookError(f"--submission {submission}: "
                            + ("is a file, not a folder; name the folder that holds the lab" if submission.exists()
                               else "does not exist; check the path"))
    tried = candidate_paths(chapter, submission)
    for path in tried:
        if path.is_file():
            return path
    for path in tried:  # there, but not a file to read: say what it is, not "rename train.py to train.py"
        problem = _not_a_file(path)
        if problem:
            raise WorkbookError(f"--submission {submission}: {path.relative_to(submission)} {problem}")
    found = sorted(str(p.relative_to(submission)) for p in submission.rglob("*.py"))[:5]
    near = [name for name in found if Path(name).name.lower() == chapter.lab_file.lower()]
    raise WorkbookError(f"--submission {submission}: no {chapter.lab_file} in it (looked in "
                        + ", ".join(str(p.relative_to(submission)) for p in tried) + "); "
                        + (f"found {', '.join(found)}" if found else "it holds no .py file")
                        + (f": rename {near[0]} to {chapter.lab_file} (names are case-sensitive)" if near else ""))


def _not_a_file(path: Path) -> str | None:
    """What is at ``path`` when something is there that is not a file to read (None: nothing is there)."""
    try:
        path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            return f"is a symlink to {os.readlink(path)}, which does not exist; put the lab file itself there"
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop and cannot be resolved; put the lab file itself there"
        return f"cannot be read ({exc.strerror})"
    if path.is_dir():
        return "is a folder, not a file; the lab must be a file of that name"
    return None if path.is_file() else "is not a regular file (a FIFO, a socket or a device); put the lab file there"


def answer_path(folder: Path, name: str, device: str) -> Path:
    """The answer file the grader reads: ``answer.<device>.toml`` where one is beside the lab (a diagnosis kept per
    device: the reference solution has one per device, since shares measured on a CPU are not a GPU's), else
    ``answer.toml``."""
    plain = folder / name
    own = plain.with_name(f"{plain.stem}.{device}{plain.suffix}")
    return own if own.is_file() else plain


class Evaluation:
    """One candidate graded in four steps: the plan (which runs the checks need, checker.grader.plan), the runs
    (each in a private, isolated process, checker.grader.runs), the evidence (traces believed only when they match
    the grader's stamps, the referee's verdicts, Nsight Compute: one frozen Evidence), and the checks (pure
    functions of it, checker.checks).

    Every run trains under a fresh secret (seed and window key, see checker.base.workloads). Runs come in pairs,
    a baseline and a candidate run under the same secret, so that the referee can compare their weights:

    * the timed pairs (only where this device grades speed): untraced, alternating which runs first;
    * the traced pair: the candidate traced with the chosen tool, its baseline traced too when a check
      compares counts with the baseline's trace. Where speed is not graded it is the only pair, so the run
      whose trace is read is also the run whose work is checked: a script cannot behave one way when traced
      and another way when it is not. Where the plan has a traced tail (``traced_tail``), the traced pair is the
      first timed pair, traced for ``trace_steps`` steps after its windows.
    """

    def __init__(self, chapter: Chapter, candidate: Path, device: str, trace_tool: str = "torch", with_ncu: bool = False,
                 keep_traces: Path | None = None, progress=None, only: set[str] | None = None,
                 bank: BaselineBank | None = None, learner: str | None = None):
        if device not in ("cpu", "cuda"):
            raise WorkbookError(f"--device {device}: choose cpu or cuda")
        if device == "cuda" and not cuda_available():
            raise WorkbookError("--device cuda: this machine has no CUDA GPU that torch can use; try --device cpu")
        if trace_tool not in TRACE_TOOLS:
            raise WorkbookError(f"--trace-tool {trace_tool}: choose torch or nsys")
        if trace_tool == "nsys":
            if device != "cuda":
                raise WorkbookError("--trace-tool nsys traces CUDA work; use it with --device cuda, or use --trace-tool torch")
            require_tool("nsys", "--trace-tool nsys", "use --trace-tool torch")
        if not candidate.is_file():
            raise WorkbookError(f"{candidate}: no such file")
        refuse_probes(candidate, display_path(candidate))
        self.chapter, self.candidate, self.device, self.trace_tool = chapter, candidate, device, trace_tool
        self.cfg = chapter.config(device)
        self.only = only
        self.plan = make_plan(chapter, device, only, with_ncu, trace_tool)
        self.workdir = sandbox.check_folder()
        # a chapter about loading data: a CPU trace's time spent waiting for a batch is the lesson, not hidden work
        self.loads_data = any(checks.KINDS[c.name].data_wait_is_work for c in chapter.checks)
        # a chapter that grades a diagnosis (chapter 08): the learner's jobs, drawn here from the grader's secret
        self.pair_args: list[str] = []
        self.pair_cfg: dict[str, Any] = {}
        self.assignment = None
        self.answer: dict | None = None
        self.answer_problem: str | None = None
        self.shown: dict[str, Any] = {}
        self.fix_job: str | None = None
        self.timed_pairs: list[tuple[RunResult, RunResult]] = []
        self.traced: tuple[RunResult, RunResult] | None = None
        self.keep_traces = keep_traces  # where to copy each trace a check read (--keep-traces)
        self.progress = progress  # called with one line before each run of a script (the CLI prints it on a terminal)
        self.timings: list[dict[str, Any]] = []
        self._t0 = time.perf_counter()
        began = time.perf_counter()
        self.notes: list[str] = [f"isolation: each run {sandbox.isolation()[1]}"]
        self._timing("probe", "who can run the candidate (an unprivileged user's interpreter)", began)
        if chapter.raw.get("answer_file"):
            self._draw_assignment(learner)
        self.bank = bank
        self._reference_noted = False
        self.reference_script = self._reference_script()
        self.compile_store = self._compile_store()
        self.uses_bank = self.reference_script != chapter.slow_script
        self.reference_label = "reference solution" if self.uses_bank else "baseline"

    def _note_other_learner(self, folder: Path, learner: str) -> None:
        """In class grading the learner is the submission folder's name: say so when the assignment file handed in
        names someone else (an exported folder like alice_smith_1234 would be graded against other jobs)."""
        handed = folder / assignments.ASSIGNMENT_FILE
        if not handed.is_file():
            return
        try:
            named = str(assignments.read_toml(handed, "the assignment").get("learner") or "").strip()
        except WorkbookError:
            return
        if named and named != learner:
            self.notes.append(f"the {assignments.ASSIGNMENT_FILE} handed in names learner {named!r}, but this "
                              f"submission is graded as learner {learner!r} (its folder's name), whose jobs differ: "
                              f"if it is {named!r}'s, rename the folder to {named!r} and grade it again")

    def _draw_assignment(self, learner: str | None) -> None:
        """The learner's jobs from the grader's secret; the answer file beside the candidate, read as data; the job
        the candidate's fix is run as (the answer's [fix] job, else the first job)."""
        chapter = self.chapter
        folder = self.candidate.parent
        own = None
        self_check = learner is None
        if self_check:  # a learner checking their own work: the learner id of their assignment file
            own = assignments.from_file(chapter, folder, chapter.lab_script.parent)
            learner = own.learner if own else assignments.learner_of(folder, chapter.lab_script.parent)
        else:  # class grading: the learner is the submission folder's name
            self._note_other_learner(folder, learner)
        self.assignment = own or assignments.draw(chapter, learner)
        path = answer_path(folder, str(chapter.raw["answer_file"]), self.device)
        if not path.is_file():
            self.answer_problem = f"no answer file: {display_path(path)} is missing"
        else:  # an answer that is not TOML is bad input: refused here, in one line, before any run (exit 2)
            self.answer = assignments.read_toml(path, "the answer")
        self.shown = read_shown(self.answer, path.parent, self.assignment.codes)  # the traces it names, read as data
        jobs = list(self.assignment.codes)
        wanted = ((self.answer or {}).get("fix") or {}).get("job") if isinstance((self.answer or {}).get("fix"), dict) else None
        self.fix_job = wanted if wanted in self.assignment.codes else jobs[0]
        code = self.assignment.codes[self.fix_job]
        self.pair_args, self.pair_cfg = ["--set", f"job={code}"], {"job": code}
        if own is not None:
            self.notes.append(f"assignment: learner {learner!r}, the jobs of your course's assignment file run as given "
                              "(a self-check: your instructor's grading draws them again from the course secret, and "
                              f"this feedback leaves out the grader's numbers); the fix runs as job {self.fix_job}")
        else:
            self.notes.append(f"assignment: learner {learner!r}, drawn from the {self.assignment.secret_kind} secret"
                              + (" (set WORKBOOK_COURSE_SECRET to grade a class)"  # class grading chose --practice
                                 if self.assignment.secret_kind == "practice" and self_check else "")
                              + f"; the fix runs as job {self.fix_job}")

    def _reference_script(self) -> Path:
        """The script trained beside each candidate run, under its secret: the slow script, unless a grading
        worker shares the slow script's speed (a BaselineBank), where the chapter's reference solution does the
        same work in less time. Chapters whose checks read the slow script's trace keep the slow script."""
        slow = self.chapter.slow_script
        if self.bank is None:
            return slow
        if self.assignment is not None:
            self.notes.append("baseline: each student's runs are paired with the slow script's: each student's fix "
                              "runs as a job of their own, whose speed no other student shares")
            return slow
        # a check that only counts what the baseline's optimizer reads (host_syncs on a CPU) reads it in the reference
        # solution's trace as well: the solution steps the slow script's optimizer
        if self.plan.slow_trace:
            self.notes.append("baseline: each student's runs are paired with the slow script's: "
                              f"{self.chapter.id}'s checks compare counts with its trace")
            return slow
        solution = self.chapter.solution_script
        if not solution.is_file():
            self.notes.append(f"baseline: each student's runs are paired with the slow script's: there is no "
                              f"reference solution ({display_path(solution)}) to train beside them")
            return slow
        return solution

    def _compile_store(self) -> "compile_cache.Claim | None":
        """torch.compile's caches of the candidate's runs (checker.grader.compile_cache), held for this check: under
        the state folder for the next `workbook check` of the same script, only for this check in class grading."""
        if not compile_cache.enabled():
            return None
        if self.bank is not None:
            store = self.workdir / "compile-store"
            store.mkdir(exist_ok=True)
        else:
            store = compile_cache.store_for(self.chapter.id, self.candidate, self.device)
        return compile_cache.claim(store) if store is not None else None

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def _timing(self, kind: str, what: str, began: float, **extra) -> None:
        self.timings.append({"kind": kind, "what": what, "start_s": round(began - self._t0, 2),
                             "wall_s": round(time.perf_counter() - began, 2), **extra})

    # ---- runs ---------------------------------------------------------------------------------------------
    def run(self, script: Path, what: str, secret: tuple[int, int], **kwargs) -> RunResult:
        shown = display_path(script)
        self.say(f"{what}: {shown}")
        seed, key = secret
        began = time.perf_counter()
        world = ranks.world_size(self.cfg)
        if script == self.candidate and self.compile_store is not None and world == 1:
            kwargs["compile_cache"] = self.compile_store  # the candidate's own runs only; a job's ranks compile cold
        if self.pair_args and "extra_args" not in kwargs:
            kwargs["extra_args"] = list(self.pair_args)  # the job the fix is for, in both runs of a pair
        if world > 1:  # a data-parallel chapter: one job of several ranks, each a run of its own
            run = ranks.run_job(self.chapter, script, self.device, world=world, workdir=self.workdir, seed=seed,
                                window_key=key, display=shown, **kwargs)
        else:
            run = run_script(self.chapter, script, self.device, workdir=self.workdir, seed=seed, window_key=key,
                             display=shown, **kwargs)
        self._timing("run", what, began, script=shown, trace=kwargs.get("trace") or kwargs.get("profiler") and "ncu",
                     compile_cache="compile_cache" in kwargs, phases=run.phases_s, forked=getattr(run, "forked", False))
        refused = forkserver.refused()
        if refused and not any(note.startswith("fork server") for note in self.notes):
            self.notes.append(f"fork server not used, each run imported torch itself: {refused}")
        self.say(f"  {sum(run.phases_s.values()):.1f} s: {describe_phases(run.phases_s)}")
        if run.survivors:
            left = "1 process" if run.survivors == 1 else f"{run.survivors} processes"
            self.notes.append(f"{shown} left {left} running after it finished; the grader "
                              "killed them")
        return run

    def make_runs(self) -> None:
        """Every run the plan asks for, before the first check, so that the referee judges them all."""
        if self.plan.timed:
            self._timed_runs(self.plan.trials)
        if self.plan.traced and self.traced is None:
            self._traced_runs()
        if self.plan.jobs:
            self._job_runs()

    def _job_runs(self) -> None:
        """Each job of the learner's assignment, run by the grader as the chapter's own slow script with the
        code the grader drew (never the learner's copy of the job), traced over the same steps as a traced run."""
        self.job_runs: dict[str, RunResult] = {}
        for job, code in self.assignment.codes.items():
            self.job_runs[job] = self.run(self.chapter.slow_script, f"job {job}, traced ({self.trace_tool})",
                                           new_secret(), steps=traced_steps(self.cfg), trace=self.trace_tool,
                                           extra_args=["--set", f"job={code}"])

    def _timed_runs(self, trials: int) -> None:
        """Timed pairs, taking turns which runs first, until every timed check is settled (at least
        ``min_trials``) or ``trials`` pairs were made: a clear verdict costs one pair, one near its threshold more."""
        baseline = self.reference_script
        least = max(1, min(trials, int(self.cfg.get("min_trials", 1))))
        if self.uses_bank:
            self._measure_bank(trials)
        for trial in range(trials):
            what = f"timed run, trial {trial + 1} (of up to {trials})"
            secret = new_secret()
            # the first pair is the traced pair where the plan says so: traced after its windows
            tail = {"trace": "torch", "trace_tail": self.plan.tail} if self.plan.tail and trial == 0 else {}
            base_tail = tail if self.plan.trace_baseline else {}
            if self.plan.window:  # every timed run traced over its window, both sides: one clock for both
                tail = base_tail = {"trace": "torch"}
            if trial % 2 == 0:
                b = self.run(baseline, what + (", then traced" if base_tail else ""), secret, **base_tail)
                c = self.run(self.candidate, what + (", then traced" if tail else ""), secret, **tail)
            else:
                every = {"trace": "torch"} if self.plan.window else {}
                c = self.run(self.candidate, what + (", traced" if every else ""), secret, **every)
                b = self.run(baseline, what + (", traced" if every else ""), secret, **every)
            self.timed_pairs.append((b, c))
            if tail and self.traced is None:
                self.traced = self.timed_pairs[-1]  # the same pair: its weights are judged once
            if len(self.timed_pairs) >= least and self._settled():
                if len(self.timed_pairs) < trials:
                    self.say(f"  the speed is clear after {len(self.timed_pairs)} pair(s): no more timed runs")
                break

    def _settled(self) -> bool:
        """Whether every timed check says more pairs could not change its verdict."""
        speed = self.speed()
        kinds = [(checks.KINDS[name], self.chapter.check(name)) for name in self.plan.timed_checks]
        return all(kind.settled is not None and kind.settled(speed, spec, self.device) for kind, spec in kinds)

    def _traced_runs(self) -> None:
        steps = traced_steps(self.cfg)
        trace_baseline = self.plan.trace_baseline  # then the reference is the slow script (_reference_script)
        if self.uses_bank and not self.timed_pairs:
            self._ensure_reference_checked()
        secret = new_secret()
        tool = f"traced run ({self.trace_tool})"
        b = self.run(self.reference_script, tool if trace_baseline else f"{self.reference_label} run", secret,
                      steps=steps, trace=self.trace_tool if trace_baseline else None)
        c = self.run(self.candidate, tool, secret, steps=steps, trace=self.trace_tool)
        self.traced = (b, c)

    def _measure_bank(self, trials: int) -> None:
        """The slow script's timed runs this worker still owes: ``trials`` of them for its first student, then
        one every few students. The first is also the one the reference solution is checked against."""
        due = self.bank.due(trials)
        for number in range(due):
            run = self.run(self.chapter.slow_script, f"the slow script's speed on this worker, run {number + 1} "
                           f"of {due}", new_secret(), **({"trace": "torch"} if self.plan.window else {}))
            self.bank.add(run.window_s, run.samples)
            self.bank.runs += 1
            if self.bank.reference is None:
                self._check_reference(run)
        self._ensure_reference_checked()

    def _ensure_reference_checked(self) -> None:
        if self.bank.reference is None:
            run = self.run(self.chapter.slow_script, "the slow script, to check the reference solution against",
                            new_secret(), steps=traced_steps(self.cfg))
            self.bank.runs += 1
            self._check_reference(run)
        if not self.bank.reference.get("agrees"):
            raise WorkbookError(self.bank.reference["why"])
        if self._reference_noted:
            return
        self._reference_noted = True
        speed = self.bank.summary()
        self.notes.append(
            (f"baseline: speed compared with the slow script's on this worker ({speed}); " if speed else
             "baseline: the slow script's speed was not timed in this check; ")
            + f"work compared with the reference solution trained under the same secret, which agreed with the slow "
            f"script's work (weights {self.bank.reference['distance']:.3f} of its training apart)")

    def _check_reference(self, slow: RunResult) -> None:
        """Train the reference solution under the slow run's secret; the referee must find the same work."""
        reference = self.run(self.reference_script, "the reference solution, under the same secret",
                              (slow.seed, slow.window_key), steps=slow.steps or None)
        judged = ask_referee(self.chapter, self.device, [(slow, reference)], self.workdir, cfg=self.pair_cfg)[0]
        kind = checks.pair_judge()  # the check that judges work, as it declares (no check is named here)
        spec = next((c for c in self.chapter.checks if c.name == kind.name), None)
        problems, distance = kind.pair_judge(judged, spec, self.device, "slow script")
        self.bank.reference = {"agrees": not problems, "distance": round(distance, 4), "problems": problems,
                               "why": (f"the reference solution {display_path(self.reference_script)} does not do the "
                                       f"slow script's work ({'; '.join(problems)}): no student can be judged "
                                       "against it; restore it (git checkout) and grade again")}

    # ---- evidence -----------------------------------------------------------------------------------------
    def all_pairs(self) -> list[tuple[RunResult, RunResult]]:
        """Every pair made, in the order the evidence indexes the referee's verdicts (whatever the candidate ran, its
        work is checked)."""
        return list(pairs_of(self.timed_pairs, self.traced))

    def speed(self) -> Speed:
        return speed_of(self.timed_pairs, self.bank if self.uses_bank else None)

    def collect(self) -> Evidence:
        """The evidence the checks judge: the runs, the traces the grader believes, the referee's verdicts and
        Nsight Compute's measurements, frozen."""
        traces = {}
        if self.traced is not None:
            b, c = self.traced
            traces["candidate"] = self._load_trace("candidate", c)
            if b.trace_file is not None:
                traces["baseline"] = self._load_trace("baseline", b)
            for role, job in (("candidate", c), ("baseline", b)):  # a job of several ranks: every rank's trace
                for rank, run in enumerate(job.ranks[1:], start=1):
                    if run.trace_file is not None:
                        traces[f"{role}.rank{rank}"] = self._load_trace(f"{role}.rank{rank}", run)
        verdicts = {}
        if self.plan.referee:
            self.say("referee: the trained weights, in a fresh process")
            began = time.perf_counter()
            pairs = self.all_pairs()
            verdicts = ask_referee(self.chapter, self.device, pairs, self.workdir, cfg=self.pair_cfg)
            self._timing("referee", f"{len(pairs)} pairs' weights", began)
        ncu = {}
        for name in self.plan.ncu:
            found = traces.get("candidate")
            if found is None or isinstance(found, TraceMismatch):
                continue  # the check fails on the trace itself
            spec = self.chapter.check(name)
            target = checks.KINDS[name].ncu_target(found, spec, self.cfg)
            began = time.perf_counter()
            ncu[name] = profile_kernel(self, target)
            self._timing("ncu", f"Nsight Compute for {name}", began)
        return Evidence(
            chapter=self.chapter, device=self.device, trace_tool=self.trace_tool, candidate=self.candidate,
            cfg=self.cfg, timed=tuple(self.timed_pairs), traced=self.traced,
            speed=self.speed() if self.timed_pairs else None, verdicts=verdicts, traces=traces, ncu=ncu,
            reference=self.reference_label, diagnosis=self._diagnosis(),
        )

    def _diagnosis(self) -> Diagnosis | None:
        if self.assignment is None:
            return None
        from checker.base.workloads import load_workload_module

        shapes_of = load_workload_module(self.chapter.dir).job_matmuls  # how a trace is recognized as one job's
        jobs = {}
        for job, run in getattr(self, "job_runs", {}).items():
            code = self.assignment.codes[job]
            jobs[job] = JobRun(code=code, design=self.assignment.designs[job],
                               trace=self._load_trace(f"job-{job}", run), step_ms=tuple(run.step_ms),
                               matmuls=shapes_of(code, self.device))
        return Diagnosis(learner=self.assignment.learner, secret_kind=self.assignment.secret_kind, jobs=jobs,
                         answer=self.answer, answer_problem=self.answer_problem, fix_job=self.fix_job,
                         shown=self.shown)

    def _load_trace(self, role: str, run: RunResult):
        """A run's trace when it lines up with the steps the grader stamped, else the TraceMismatch that says why."""
        from checker.trace import load

        trace_file = run.trace_file
        if self.keep_traces is not None and trace_file is not None:
            self.keep_traces.mkdir(parents=True, exist_ok=True)
            suffix = "".join(trace_file.suffixes[-2:]) if trace_file.name.endswith(".gz") else trace_file.suffix
            shutil.copy(trace_file, self.keep_traces / f"{self.chapter.id}-{role}-{self.trace_tool}{suffix}")
        began = time.perf_counter()
        trace = load(trace_file)
        self._timing("parse", f"{role}'s trace", began)
        first = run.trace_first_step if run.trace_first_step is not None else int(self.cfg["warmup"])
        # a run traced over its window records every window step; a traced pair or tail, trace_steps of them
        count = run.steps - first if run.steps and first < run.steps else int(self.cfg.get("trace_steps", 10))
        problem = trace_problem(trace, run, first, count, self.device,
                                excuse_data_wait=self.loads_data)
        return TraceMismatch(f"the {role}'s trace {problem}") if problem else trace

    # ---- checks -------------------------------------------------------------------------------------------
    def run_checks(self, variant_label: str, only: set[str] | None = None) -> Report:
        """Plan, runs, evidence, checks; with ``only``, the other checks are reported as skipped."""
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
                self.make_runs()
            except IncompleteWork as err:
                incomplete = err
            if incomplete is None:
                evidence = self.collect()
            results = judge(self.chapter, self.plan.skipped, evidence, incomplete, self.device)
        finally:
            sys.dont_write_bytecode = wrote_bytecode
        began = time.perf_counter()
        changed = trusted.changed()
        self._timing("tamper", "the grader's files unchanged", began)
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

    def release(self) -> None:
        """Let go of what the check held besides its folder (the compile cache's claim)."""
        if self.compile_store is not None:
            self.compile_store.release()

    def cleanup(self) -> None:
        self.release()
        shutil.rmtree(self.workdir, ignore_errors=True)


def traced_steps(cfg) -> int:
    """Steps of a traced run: the warm-up, then the traced steps."""
    return int(cfg["warmup"]) + int(cfg.get("trace_steps", 10))


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
        return ev.run_checks(str(submission) if submission else variant, only=only)
    finally:
        ev.release()
        if not keep:
            ev.cleanup()
