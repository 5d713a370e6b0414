"""triage: the answer names each mystery job's wall as the grader's own measurements decide it (chapter 08).

The grader runs every job of the learner's assignment itself (the chapter's slow script, with the code the grader
drew from its secret: checker.grader.assignment), traces it, and reads from the trace engine what the answer is
asked to quote: the share of the step spent waiting in the `data` range, top-level ops (CPU) or kernel launches
(GPU) per step, and on a GPU the share of the step the GPU sat idle and the top kernel's share of GPU time.

Then it decides each job's wall by chapter.toml's rules, in order:

1. data-bound: the step waits for its batch at least ``data_wait`` of its time;
2. launch-bound (overhead): on a GPU, the GPU idles at least ``gpu_idle`` of the step; on a CPU, where there is
   no GPU to idle, the step spends at most ``host_ms_per_op`` per top-level op outside the wait (many ops, each
   costing little more than its dispatch);
3. kernel-bound: on a GPU, the rest (the GPU is busy: the kernels are the step); on a CPU this rule cannot be
   confirmed (it reads GPU time), so a job neither rule 1 nor rule 2 claims is left unconfirmed, said so.

A job's answer passes when its wall is the one decided (on a CPU, an unconfirmed job's answer must not name a
wall that rules 1 and 2 measured to be false) and it shows its work: it names the trace its numbers were read
from (``trace = "..."``, read by checker.grader.shown_work), that trace is one of this job (its matrix
multiplies have the job's shapes, ``JobRun.matmuls``: a trace of another job, of another learner's job, or one
made up without them is not), every number quoted is the number that trace holds (within ``read_tolerance``),
and within the tolerance of the grader's own. The check never reads which wall a job was drawn for to grade it:
the design is shown beside the measurement, so that a rule that disagrees with the design is seen.

Only the practice learner's answers (public: the reference solution is theirs) are printed; for any other
learner the feedback says what is right or wrong and never the grader's numbers or walls.
"""

from __future__ import annotations

import math

from checker.checks import FAILED, JOBS, PASSED, check, result
from checker.checks.evidence import TraceMismatch

WALLS = ("data", "overhead", "kernel")
# a learner's self-check of a course assignment (checker.grader.assignment.from_file): the grader's numbers and
# walls for these jobs are the answer to the graded run, so the feedback says only what is right or wrong
COURSE_FILE = "course file"
PRACTICE_LEARNER = "practice"  # the one learner whose answers a check prints: the public practice jobs
SHARES = ("data_wait", "gpu_idle", "top_kernel_share")  # shares of a step (or of GPU time): an absolute tolerance
COUNTS = ("ops_per_step",)                              # counts: a relative tolerance
EVIDENCE = {"cpu": ("data_wait", "ops_per_step"), "cuda": ("data_wait", "ops_per_step", "gpu_idle", "top_kernel_share")}
KERNEL_ON_CPU = ("the kernel-bound rule reads the GPU's busy time and the top kernel's share of it, which a CPU "
                 "run does not have: confirm it with `workbook check 08 --device cuda`")


def measure(trace, device: str) -> dict:
    """What the grader reads of one job's trace (the trace engine's summary: what `workbook report` prints)."""
    s = trace.summary()
    wait = float(s["data_wait_fraction"] or 0.0)
    m = {"data_wait": round(wait, 4), "step_ms": s["step_ms_mean"]}
    if device == "cuda":
        m["ops_per_step"] = s["launches_per_step"]
        m["gpu_idle"] = s["gpu_idle_fraction"]
        if m["gpu_idle"] is None:  # why no GPU rule can be applied: clock skew, or no GPU work in the steps
            m["no_gpu_idle"] = trace.gpu_clock_skew or "the trace shows no GPU work"
        top = s["top_kernels"][0] if s["top_kernels"] else None
        m["top_kernel_share"] = top["share"] if top else None
        m["top_kernel"] = top["name"][:80] if top else None
    else:
        m["ops_per_step"] = s["top_level_ops_per_step"]
        m["host_ms_per_op"] = s["host_ms_per_op"]  # the median step's: what `workbook report` prints on its Ops line
    return m


def decide(m: dict, device: str, rules: dict) -> tuple[str | None, str]:
    """(the wall, or None where the CPU cannot confirm one; the rule that decided, as a person reads it)."""
    if m["data_wait"] >= rules["data_wait"]:
        return "data", f"rule 1: data wait {m['data_wait']:.0%} >= {rules['data_wait']:.0%} of the step"
    if device == "cuda":
        idle = m.get("gpu_idle")
        if idle is None:
            return None, f"{m.get('no_gpu_idle') or 'the trace shows no GPU work'}: no GPU rule can be applied"
        if idle >= rules["gpu_idle"]:
            return "overhead", (f"rule 2: data wait {m['data_wait']:.0%} < {rules['data_wait']:.0%}; GPU idle "
                                f"{idle:.0%} >= {rules['gpu_idle']:.0%} of the step")
        share = m.get("top_kernel_share")
        return "kernel", (f"rule 3: data wait {m['data_wait']:.0%} < {rules['data_wait']:.0%}; GPU idle {idle:.0%} < "
                          f"{rules['gpu_idle']:.0%}: the GPU is busy"
                          + (f", its top kernel {share:.0%} of GPU time" if share is not None else ""))
    per_op = m.get("host_ms_per_op")
    if per_op is not None and per_op <= rules["host_ms_per_op"]:
        return "overhead", (f"rule 2 (CPU): data wait {m['data_wait']:.0%} < {rules['data_wait']:.0%}; "
                            f"{m['ops_per_step']:g} ops per step at {per_op * 1000:.1f} us each <= "
                            f"{rules['host_ms_per_op'] * 1000:g} us")
    shown = f"{per_op * 1000:.0f} us" if per_op is not None else "unknown"
    return None, (f"rules 1 and 2 (CPU) do not hold: data wait {m['data_wait']:.0%} < {rules['data_wait']:.0%}, "
                  f"{shown} per op > {rules['host_ms_per_op'] * 1000:g} us; kernel-bound by elimination, not "
                  f"confirmed: {KERNEL_ON_CPU}")


def matmuls_of(trace) -> set:
    """The (m, k, n) of each matrix multiply a trace recorded with its shapes (aten::addmm: bias, input, weight)."""
    import json

    found = set()
    for key in (getattr(trace, "meta", None) or {}).get("op_shapes", {}):
        name, _, dims = key.partition(" ")
        try:
            shapes = json.loads(dims)
        except ValueError:
            continue
        if name == "aten::addmm" and len(shapes) >= 3 and all(isinstance(d, list) and len(d) == 2 for d in shapes[1:3]):
            (m, k), (k2, n) = shapes[1], shapes[2]
            if k == k2 and all(isinstance(v, int) for v in (m, k, n)):
                found.add((m, k, n))
    return found


def shown_problem(job: str, trace, run, device: str) -> str | None:
    """Why the trace a job's answer names is not a trace of that job as it ships, or None when it is."""
    if isinstance(trace, str):
        return trace
    source = getattr(trace, "source", "")
    name = source.rsplit("/", 1)[-1]
    if bool(trace.has_cuda) != (device == "cuda"):
        return f"trace {name} is a {'GPU' if trace.has_cuda else 'CPU'} trace; this check runs on {device}"
    seen = matmuls_of(trace)
    if not seen:
        return (f"trace {name} records no matrix multiply with its shapes: make it with `workbook profile 08 --tool "
                f"torch --run --job {job}` (its recipe records them)")
    ships = f"profile the job as it ships: `workbook profile 08 --tool torch --run --variant slow --job {job}`"
    if run.matmuls and seen != set(run.matmuls):
        return (f"trace {name} is not a trace of job {job} on {device}: its matrix multiplies are not this job's "
                f"sizes (a trace of another job, another device, or a changed train.py; {ships})")
    if device == "cpu":
        missing = missing_data_work(name, job, trace, run.trace, ships)
        if missing:
            return missing
    ours = ops_by_name(run.trace)
    if ours:  # the grader's own trace lists aten ops (torch.profiler): the learner's must run the same ones
        theirs = ops_by_name(trace)
        off = sorted(op for op in set(ours) | set(theirs)
                     if abs(theirs.get(op, 0.0) - ours.get(op, 0.0)) > max(1.0, 0.02 * ours.get(op, 0.0)))
        if off:
            return (f"trace {name} does not run job {job}'s ops: {len(off)} of its aten ops (e.g. {off[0]}) come a "
                    f"different number of times per step than in the job (a trace made by hand, or of a changed "
                    f"train.py; {ships})")
    return None


# A job's dataset works in numpy, which no aten op records, so its data work shows in a trace only as time (which a
# sleep makes too) and as the Python calls each fetch runs. On a CPU the practice jobs' fetches run 160-480 calls
# where the data work is a round or none, and 17,000-20,500 where it is the design (the data-bound jobs' numpy rounds,
# every sample fetched in the training process): evidence/history/2026-11-28-cpu-session46-fetch-calls.md. Where the
# grader's own trace of the job fetches with this many calls or more, every fetch of the learner's trace must run at
# least FETCH_CALLS_SHARE of them, counted by function: calls the job's fetch makes too (a no-op called in a loop
# reaches a count, not the job's functions).
FETCH_WORK_CALLS = 2000
FETCH_CALLS_SHARE = 0.5


def missing_data_work(name: str, job: str, trace, ours, ships: str) -> str | None:
    """Why the learner's trace of a job with data work in its fetches lacks that work (a trace of the job with its
    dataset changed, a sleep in place of the work, calls of other functions making up the count), or None. The
    calls are compared by function, as a multiset: what counts of a learner's fetch is what the grader's own fetch
    of the job calls too. On a CPU: the GPU reference traces keep no Python."""
    from checker.trace.analyses.dataloader import fetch_calls

    base = sorted(fetch_calls(ours.events).values(), key=lambda calls: sum(calls.values()))
    if not base or sum(base[len(base) // 2].values()) < FETCH_WORK_CALLS:
        return None
    job_calls = base[len(base) // 2]
    expected = sum(job_calls.values())
    theirs = fetch_calls(trace.events)
    if not theirs:
        return f"trace {name} records no fetch of a batch (the harness's `data` ranges): {ships}"
    shared = {step: sum((calls & job_calls).values()) for step, calls in theirs.items()}
    step, fewest = min(shared.items(), key=lambda kv: kv[1])
    if fewest >= FETCH_CALLS_SHARE * expected:
        return None
    other = sum(theirs[step].values()) - fewest
    return (f"trace {name} does not run job {job}'s data work: its fetch of step {step} ran {fewest} of the Python calls "
            f"the job's fetches run ({expected}){f', and {other} calls of other functions' if other else ''} (a trace of "
            f"the job with its dataset changed, or recorded without Python calls; {ships})")


def ops_by_name(trace) -> dict[str, float]:
    """Top-level aten ops per step of a trace's steps, by name: the job's own sequence of ops ({} without any)."""
    from checker.trace.analyses.counts import top_level_aten_ops

    if not getattr(trace, "has_steps", False):
        return {}
    ops = top_level_aten_ops(trace.events)
    ops = ops[ops["step"].notna()]
    steps = ops["step"].nunique()
    return (ops.groupby(ops["name"].astype(str)).size() / steps).to_dict() if steps else {}


def quoted(claimed) -> bool:
    """Whether an answer's value is a number that can be held to a measurement: a finite int or float. TOML has
    ``nan`` and ``inf``, which no tolerance can reject (red team 37's `nanquote_08` quoted nan for every number)."""
    return not isinstance(claimed, bool) and isinstance(claimed, (int, float)) and math.isfinite(claimed)


def read_off(name: str, claimed, read, tolerance: dict) -> str | None:
    """Why a quoted number is not the one the learner's own trace holds, or None when it is."""
    if read is None or not quoted(claimed):
        return None  # within() says a quote that is no number
    allowed = float(tolerance["share"] if name in SHARES else tolerance["count"])
    off = abs(claimed - read) if name in SHARES else abs(claimed - read) / max(abs(read), 1.0)
    if not off <= allowed:  # fail-closed: a comparison with NaN is false both ways
        return f"{name} = {claimed:g}, but the trace you named reads {read:.4g}: quote what it shows"
    return None


def within(name: str, claimed, measured, tolerance: dict, hide: bool = False) -> str | None:
    """Why a quoted number is not the grader's, or None when it is within tolerance (``hide``: without the
    grader's number)."""
    if not quoted(claimed):  # said even where the grader measured nothing to hold it to
        return f"{name} = {claimed!r} is not a number" + (
            "" if hide or measured is None else f" (the grader measured {measured:g})")
    if measured is None:
        return None
    if name in SHARES:
        allowed = float(tolerance["share"])
        if not abs(claimed - measured) <= allowed:
            if hide:
                return f"{name} = {claimed:g} is more than {allowed:g} from the grader's measurement"
            return f"{name} = {claimed:g}, the grader measured {measured:.3f} (allowed: +-{allowed:g})"
        return None
    allowed = float(tolerance["count"])
    if not abs(claimed - measured) <= allowed * max(abs(measured), 1.0):
        if hide:
            return f"{name} = {claimed:g} is more than {allowed:.0%} from the grader's measurement"
        return f"{name} = {claimed:g}, the grader measured {measured:g} (allowed: +-{allowed:.0%})"
    return None


@check("triage", needs=(JOBS,), key="jobs_right", fmt="{}", data_wait_is_work=True)
def triage(evidence, spec):
    """names each job's wall as the grader's measurements decide it, quoting them within tolerance"""
    device = evidence.device
    rules = dict(spec.threshold_for(device))
    tolerance = dict(spec.options.get("tolerance", {"share": 0.15, "count": 0.15}))
    diagnosis = evidence.diagnosis
    answer = diagnosis.answer if diagnosis.answer is not None else {}
    lines, problems, measured_jobs, unconfirmed = [], [], {}, []
    if diagnosis.answer_problem:
        problems.append(diagnosis.answer_problem)
    quoted_on = answer.get("device")
    if diagnosis.answer is not None and quoted_on != device:
        problems.append(f"the answer's evidence was measured on device = {quoted_on!r}; this check runs on {device!r}: "
                        f"measure your jobs on {device} and set device = \"{device}\"")
    jobs_answered = answer.get("jobs") if isinstance(answer.get("jobs"), dict) else {}
    # the grader's numbers and walls are the answer: a self-check of a course file never shows them, and a class
    # graded under the course secret keeps them out of the student's feedback (the instructor's ledger keeps them
    # in `measured`), so that a resubmission cannot copy them
    # only the practice learner's answers are public (the reference solution is theirs): any other learner's
    # feedback hides the grader's numbers and walls; the instructor's ledger keeps them under a course secret
    hide = not (diagnosis.secret_kind == "practice" and diagnosis.learner == PRACTICE_LEARNER)
    self_check = hide and diagnosis.secret_kind != "course"
    reading = dict(spec.options.get("read_tolerance", {"share": 0.01, "count": 0.02}))
    shown_traces = getattr(diagnosis, "shown", None) or {}
    right = 0
    for job, run in diagnosis.jobs.items():
        if isinstance(run.trace, TraceMismatch):
            problems.append(f"job {job}: {run.trace}")
            continue
        m = measure(run.trace, device)
        wall, rule = decide(m, device, rules)
        measured_jobs[job] = {**m, "wall": wall, "design": run.design}
        given = jobs_answered.get(job) if isinstance(jobs_answered.get(job), dict) else {}
        claimed = str(given.get("wall", "")).strip().lower()
        wrong = []
        mine = None  # the numbers of the trace the answer names, read by the grader: the work the answer shows
        if diagnosis.answer is not None:
            problem = shown_problem(job, shown_traces.get(job, "no trace named: add trace = \"...\", the trace "
                                                           "you read this job's numbers from"), run, device)
            if problem:
                wrong.append(problem)
            else:
                mine = measure(shown_traces[job], device)
        if mine is None:
            # an answer for a job rests on a trace of the learner's own: without one nothing of it is compared
            # with the grader's measurement, so that no feedback (a wall or a number said wrong) tells the answer
            problems.append(f"job {job}: " + "; ".join(wrong or ["no answer"]) + " (its wall and numbers are "
                            "compared with the grader's once the answer names a trace of your own of this job)")
            if hide:
                if self_check:
                    measured_jobs[job] = {"right": False}
                lines.append(f"job {job}: not right yet")
            continue
        # the grader's numbers and wall for a job are feedback on a reading of the learner's own trace of it: shown
        # (to the practice learner) only beside one, never instead of one
        shown = ", ".join(f"{k} {m[k]:g}" for k in EVIDENCE[device] if m.get(k) is not None)
        if not hide:
            lines.append(f"job {job}: measured {shown}; {rule.split('; kernel-bound by elimination')[0]} -> "
                         f"{wall or 'kernel-bound by elimination, unconfirmed on a CPU'}")
        if claimed not in WALLS:
            wrong.append(f"wall = {given.get('wall', '')!r}: name one of {', '.join(WALLS)}")
        elif wall is not None and claimed != wall:
            wrong.append(f"wall = {claimed!r} is not the wall the grader's measurement decides" if hide
                         else f"wall = {claimed!r}, but the grader's measurement decides {wall!r}")
        elif wall is None and device == "cuda":  # a GPU's trace decides every job: one that does not is unjudged
            wrong.append(f"the grader's trace of this job decides no wall ({rule})")
        elif wall is None:
            unconfirmed.append(job)
            if claimed != "kernel":
                wrong.append(f"wall = {claimed!r} is not the wall the grader's measurement decides" if hide
                             else f"wall = {claimed!r}, but the grader measured that rule false")
        for name in EVIDENCE[device]:
            if name not in given:
                wrong.append(f"{name} is missing (the grader measured {m[name]:g})" if m.get(name) is not None
                             and not hide else f"{name} is missing")
                continue
            why = within(name, given[name], m.get(name), tolerance, hide)
            if why:
                wrong.append(why)
            elif mine is not None and (why := read_off(name, given[name], mine.get(name), reading)):
                wrong.append(why)
        if wrong:
            problems.append(f"job {job}: " + "; ".join(wrong))
        else:
            right += 1
        if hide:  # what is right or wrong, never the grader's numbers or wall
            if self_check:
                measured_jobs[job] = {"right": not wrong}
            lines.append(f"job {job}: {'right' if not wrong else 'not right yet'}")
    if diagnosis.answer is not None:
        fix = answer.get("fix") if isinstance(answer.get("fix"), dict) else {}
        if fix.get("job") not in diagnosis.jobs:
            problems.append(f"[fix] job = {fix.get('job', '')!r}: name the job your train.py fixes "
                            f"({', '.join(diagnosis.jobs)}); it was run as job {diagnosis.fix_job}")
    if unconfirmed and not hide:
        lines.append(f"not confirmed here: job(s) {', '.join(unconfirmed)} ({KERNEL_ON_CPU})")
    if hide:
        why = ("a self-check of your course's assignment" if diagnosis.secret_kind == COURSE_FILE
               else "graded under your course's secret" if diagnosis.secret_kind == "course"
               else f"learner {diagnosis.learner!r}'s jobs (only the practice learner's answers are shown)")
        lines.append(why + ": the grader's numbers and walls are left out (they would be the answer); profile each job "
                     "(`workbook profile 08 --tool torch --run --job a`) and compare with `workbook report`")
        unconfirmed = []
    measured = {"jobs": measured_jobs, "jobs_right": f"{right}/{len(diagnosis.jobs)}", "learner": diagnosis.learner,
                "secret": diagnosis.secret_kind, "fix_job": diagnosis.fix_job, "unconfirmed": unconfirmed,
                "tolerance": tolerance}
    status = PASSED if not problems and right == len(diagnosis.jobs) else FAILED
    return result(spec, status, measured=measured, threshold=rules, evidence=problems + lines)
