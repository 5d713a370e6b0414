"""step_time_report, mean_step_report: a benchmark's report about its own steps, held against the grader's clock.

Chapter 00's lab is a benchmark: it runs the training steps and reports how long one takes. That report is
produced inside the candidate's process, so it is data to check, never a measurement: the grader compares it
with what it measured itself, on its own clock, of the same steps of the same run (``RunResult.step_ms``: one
interval per timed step, stamped as each step starts, the last one ending when the harness has synchronized
and closed the window).

* ``step_time_report``: the report covers the timed steps (``steps``, warm-up excluded) and its ``p50_ms``
  and ``p90_ms`` are within the threshold (a relative tolerance) of the grader's percentiles of those steps.
  Percentile methods differ (numpy's default interpolates at rank p(n-1), ``statistics.quantiles`` at
  p(n+1)-1, others round), and every common one lands between the two neighbouring order statistics
  ``sorted[floor(p(n-1))]`` and ``sorted[ceil(p(n+1)-1)]``: a report anywhere in that band is right. Where
  the two differ a lot (a few slow steps among the long ones on a busy machine), one fixed method would fail
  a correct benchmark on a busy machine, where a few slow steps sit among the long ones.
  On a GPU the truth per step is the device's own time, from the trace the grader holds (``device_step_ms``:
  from the first GPU work of a step to the first of the next), not the host's stamps: a benchmark that waits for
  the device only every few steps times the queueing of the others, and the host stamps, taken at the same
  moments, would agree with it;
* ``step_cost``: the observer does not change the observed. The candidate's steps cost what the baseline's cost
  under the same secret (the mean step of each timed window, both traced alike), within the chapter's allowance:
  a benchmark that paces every step to a beat chosen in warm-up reports a p50, p90 and mean that are all true,
  and all the beat, of steps it made slower. On a CPU, where an op has finished when its call returns, the time
  each traced step ran no op on its own thread is held to the slow script's too (``idle_margin``): a step slept or
  spun to a beat holds the padding between its ops, however little it is against the allowance;
* ``mean_step_report``: its ``mean_ms`` is within the threshold of the grader's mean step time over the timed
  window. The window is synchronized at both ends by the harness, so this holds on a GPU whether or not the
  script waits for the device; a clock read right after queueing the work lands far below it.
* ``step_work``: each timed step's interval holds that step's own training. The grader's truth per step is the
  time between two step stamps (two calls of next() on ``session.steps()``), and which work runs between them
  is the script's choice: a benchmark that splits long batches and runs a queue of equal pieces in every interval
  makes every interval cost the same, and then one mean is p50, p90 and mean of intervals it reshaped. So the work
  is counted, not inferred from the time: in the candidate's trace and the slow script's (same batches in the
  same steps, both traced with record_shapes), every step's matrix-product FLOPs, forward and backward apart, must
  be the slow script's of the same step within the threshold (a relative tolerance), and its optimizer steps as
  many (checker.trace.analyses.work: ``training_work``, ``work_by_step``). Every step is judged, none by a median.

The report reaches the grader as ``RunResult.reports`` (name -> number): the script calls
``session.report(name, value)``, which sends it over the grader's channel. It is untrusted: only the
comparison counts.
"""

from __future__ import annotations

import math

import numpy as np

from checker.checks import BASELINE_TRACE, FAILED, PASSED, RUN, TRACE, check, result
from checker.checks.evidence import TraceMismatch, cpu_per_step, slow_cpu_pairs
from checker.trace.analyses.clocks import clock_reads, clock_step_ms
from checker.trace.analyses.collectives import RATE_HEADROOM, rate_cap
from checker.trace.analyses.ops import uncovered_shares
from checker.trace.analyses.work import describe_step, extra_ops_by_step, training_work, work_by_step

KNOWN = ("steps", "p50_ms", "p90_ms", "mean_ms")
PERCENTILES = {"p50_ms": 0.5, "p90_ms": 0.9}
# on a CPU, the per-step ratio at this quantile must be within step_median's allowance for a window mean the machine
# slowed to be excused (_slowed_by_the_machine): above it lie the slowest fifth of the steps
UPPER_STEPS = 0.8


def read_report(run) -> dict[str, float] | None:
    """The numbers the run reported about its steps (session.report), or None when it reported none."""
    sent = getattr(run, "reports", None)
    if not sent:
        return None
    return {str(k): _number(v) for k, v in sent.items()}


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return number


def grader_times(run) -> dict[str, float]:
    """What the grader measured of the timed steps: steps, p50_ms, p90_ms, mean_ms."""
    times = np.asarray(run.step_ms, dtype=float)
    if not len(times):
        return {"steps": 0}
    return {"steps": int(len(times)), "p50_ms": float(np.percentile(times, 50)),
            "p90_ms": float(np.percentile(times, 90)), "mean_ms": float(times.mean())}


DEVICE_KINDS = ("kernel", "memcpy", "memset")


def device_step_ms(events, steps=None) -> list[float]:
    """The device's time per traced step (ms), from a trace's events: from the first GPU work a step launched to
    the first of the next (the device idle between them belongs to the earlier step, as a synchronized clock
    counts it); the last step ends where its GPU work ends. ``steps``: only these step numbers. Steps with no GPU
    work are left out."""
    work = events[events["kind"].isin(DEVICE_KINDS) & events["step"].notna()]
    if steps is not None:
        work = work[work["step"].isin(list(steps))]
    if work.empty:
        return []
    spans = work.groupby("step").agg(first=("start_ns", "min"), last=("end_ns", "max")).sort_index()
    firsts, lasts = spans["first"].to_numpy(), spans["last"].to_numpy()
    ends = np.append(firsts[1:], lasts[-1])
    return [float(ms) for ms in (ends - firsts) / 1e6]


def step_truth(evidence, run) -> tuple[list[float], str, str | None]:
    """(the true time of each timed step in ms, where it comes from, why there is none). On a CPU an op has finished
    when its call returns, so the grader's host stamps are the truth; on a GPU the device's own times from the
    trace the grader holds are."""
    if evidence.device != "cuda":
        return list(run.step_ms), "the grader's clock", None
    try:
        trace = evidence.trace("candidate")
    except Exception as err:  # noqa: BLE001 - a trace that does not line up decides nothing: said, and failed
        return [], "", f"the trace of the run gives no device time per step ({err})"
    if trace is None or getattr(trace, "gpu_clock_skew", None):
        why = trace.gpu_clock_skew if trace is not None else "no trace"
        return [], "", f"the trace of the run gives no device time per step ({why})"
    times = device_step_ms(trace.events)
    if len(times) < 2:
        return [], "", "the trace of the run shows no GPU work in its steps, so the device's time per step is unknown"
    return times, "the device's own time (the grader's trace)", None


def percentile_band(times, fraction: float) -> tuple[float, float]:
    """The range every common percentile method can give for ``fraction`` (0.9 for p90) of ``times``: the order
    statistics at the lowest rank any of them interpolates from, floor(p(n-1)), and the highest,
    ceil(p(n+1)-1) (both 0-based, clamped to the series)."""
    ordered = np.sort(np.asarray(times, dtype=float))
    last = len(ordered) - 1
    low = min(max(math.floor(fraction * last), 0), last)
    high = min(max(math.ceil(fraction * (last + 2) - 1), 0), last)
    return float(ordered[low]), float(ordered[high])


def compare(name: str, reported: float, truth: float, tolerance: float,
            band: tuple[float, float] | None = None, measured_by: str = "the grader's",
            measured: str = "the steps ran") -> tuple[float, str | None]:
    """(how many times off, a line of evidence when off by more than the tolerance). ``band`` is the range of
    right answers (see percentile_band); without it, ``truth`` is the one right answer. ``measured_by`` and
    ``measured`` say in the line whose measurement ``truth`` is."""
    if not math.isfinite(reported) or reported <= 0:
        return float("inf"), f"{name} is {reported!r}, not a positive number of milliseconds"
    low, high = band if band is not None else (truth, truth)
    nearest = min(max(reported, low), high)
    off = max(reported / nearest, nearest / reported)
    if abs(reported - nearest) <= tolerance * nearest:
        return off, None
    how = "faster than" if reported < nearest else "slower than"
    grader = f"{truth:.3f} ms" if low == high else f"{truth:.3f} ms (any of {low:.3f}-{high:.3f} ms, by method)"
    return off, (f"{name} {reported:.3f} ms vs {measured_by} {grader}: {off:.2f}x {how} {measured} "
                 f"(tolerance {tolerance:.0%})")


def _no_report(spec, tolerance, truth):
    return result(spec, FAILED, threshold=tolerance, measured={"grader": truth}, evidence=[
        "the run reported no step times: call session.report(name, value) for steps, p50_ms, p90_ms and mean_ms "
        "(the lab's last lines do it)"])


def _summary(truth: dict[str, float]) -> str:
    return (f"the grader timed {truth['steps']} steps: p50 {truth['p50_ms']:.3f} ms, p90 {truth['p90_ms']:.3f} ms, "
            f"mean {truth['mean_ms']:.3f} ms")


def report_failure(measured: dict, threshold) -> str | None:
    """What decided a failed step_time_report for its gradebook cell: percentiles the report lacks, a step count
    that is not the grader's (None: the ratio decided, or nothing was measured)."""
    reported, grader = measured.get("reported") or {}, measured.get("grader") or {}
    if not grader:
        return None
    missing = [name[:3] for name in PERCENTILES if name not in reported]
    parts = ["no " + "/".join(missing)] if missing else []
    steps = reported.get("steps")
    if steps is None:
        parts.append("no step count")
    elif not math.isfinite(steps) or int(steps) != grader.get("steps"):
        parts.append(f"{steps:g} steps vs {grader.get('steps')} timed")
    if not parts and measured.get("worst_ratio") is not None:
        parts.append(f"{measured['worst_ratio']:.2f}x off")
    return ", ".join(parts) or None


@check("step_time_report", needs=(RUN, TRACE), key="worst_ratio", fmt="{:.2f}x off", failure=report_failure)
def step_time_report(evidence, spec):
    """the lab's p50 and p90 step times agree with the grader's own measure of the same steps"""
    tolerance = float(spec.threshold_for(evidence.device))
    run = evidence.candidate_run
    truth = grader_times(run)
    if not truth["steps"]:
        return result(spec, FAILED, threshold=tolerance, evidence=["the grader stamped no timed steps in this run"])
    per_step, source, missing = step_truth(evidence, run)
    if missing:
        return result(spec, FAILED, threshold=tolerance, evidence=[missing])
    if evidence.device == "cuda":  # the percentiles of the device's times; steps and mean stay the window's
        device = grader_times(type("Device", (), {"step_ms": per_step})())
        truth = dict(truth, p50_ms=device["p50_ms"], p90_ms=device["p90_ms"])
    report = read_report(run)
    if report is None:
        return _no_report(spec, tolerance, truth)
    lines, ratios = [], []
    reported_steps = report.get("steps")
    if reported_steps is None or not math.isfinite(reported_steps) or int(reported_steps) != truth["steps"]:
        shown = "no step count" if reported_steps is None else f"{reported_steps:g} steps"
        lines.append(f"the report covers {shown}; the grader timed {truth['steps']} (steps {evidence.cfg.get('warmup', 0)} "
                        f"on: the warm-up steps before them pay one-time costs and are not timed)")
    for name, fraction in PERCENTILES.items():
        if name not in report:
            lines.append(f"the report has no {name}: the grader's {name[:3]} of the timed steps is "
                            f"{truth[name]:.3f} ms")
            continue
        band = percentile_band(per_step, fraction)
        off, line = compare(name, report[name], truth[name], tolerance, band)
        ratios.append(off)
        if line:
            lines.append(line)
    clock, clock_lines = against_clock_reads(evidence, spec, report)
    lines += clock_lines
    measured = {"reported": {k: report[k] for k in KNOWN if k in report}, "grader": truth, "truth": source,
                "worst_ratio": round(max(ratios), 3) if ratios else None}
    if clock is not None:
        measured["clock_reads"] = clock
    if lines:
        return result(spec, FAILED, measured=measured, threshold=tolerance, evidence=lines + [_summary(truth)])
    return result(spec, PASSED, measured=measured, threshold=tolerance, evidence=[
        f"p50 {report['p50_ms']:.3f} ms and p90 {report['p90_ms']:.3f} ms reported; " + _summary(truth)])


def against_clock_reads(evidence, spec, report: dict[str, float]) -> tuple[dict | None, list[str]]:
    """(what the script's own clock reads measured, lines where the report is not made of them), where chapter.toml
    sets ``clock_tolerance`` for the device (None, []: not judged here).

    A report within tolerance of the truth can still have been measured elsewhere: on warm-up steps, on a copy of the
    model rehearsed in set-up, or modelled from a fixed pattern, while the timed steps ran with no clock at all. A
    benchmark of the timed steps reads a clock in each of them, and the trace holds every read
    (checker.trace.analyses.clocks): each timed step must hold one, and the report must be what those reads measured."""
    tolerance = spec.option_for("clock_tolerance", evidence.device)
    if tolerance is None:
        return None, []
    tolerance = float(tolerance)
    try:
        trace = evidence.trace("candidate")
    except TraceMismatch as err:
        return None, [f"the script's clock reads could not be read from its trace: {err}"]
    if trace is None:
        return None, ["the run has no trace, so what the script's own clock reads measured is unknown"]
    warmup = int(evidence.cfg.get("warmup", 0))
    traced = set(trace.events["step"].dropna().astype(int))
    steps = [s for s in range(warmup, warmup + len(evidence.candidate_run.step_ms)) if s in traced]
    stepping = trace.get_steps()[["pid", "tid"]].drop_duplicates().itertuples(index=False)
    per_step = clock_step_ms(clock_reads(trace.events, threads=list(stepping)), steps)
    missing = [step for step, ms in per_step.items() if ms is None]
    if missing or not per_step:
        first = f" (the first: step {missing[0]})" if missing else ""
        return {"steps": len(per_step), "steps_without_reads": len(missing)}, [
            f"{len(missing)} of {len(per_step)} timed steps hold no clock read of the script's on the thread that ran "
            f"them{first}: a report of the timed steps is made of clock reads taken in them, so this one was measured "
            "elsewhere (warm-up steps, a rehearsal in set-up, a model of the steps, a thread of its own)"]
    times = list(per_step.values())
    found = {"steps": len(times), "p50_ms": round(float(np.percentile(times, 50)), 3),
             "p90_ms": round(float(np.percentile(times, 90)), 3), "mean_ms": round(float(np.mean(times)), 3)}
    lines = []
    for name in ("p50_ms", "p90_ms", "mean_ms"):
        if name not in report:
            continue
        band = percentile_band(times, PERCENTILES[name]) if name in PERCENTILES else None
        _off, line = compare(name, report[name], found[name], tolerance, band,
                             measured_by="the script's own clock reads in the timed steps measured",
                             measured="those reads")
        if line:
            lines.append(line)
    return found, lines


@check("mean_step_report", needs=(RUN,), key="ratio", fmt="{:.2f}x off")
def mean_step_report(evidence, spec):
    """the lab's mean step time agrees with the grader's own clock over the same steps"""
    tolerance = float(spec.threshold_for(evidence.device))
    run = evidence.candidate_run
    truth = grader_times(run)
    if not truth["steps"]:
        return result(spec, FAILED, threshold=tolerance, evidence=["the grader stamped no timed steps in this run"])
    report = read_report(run)
    if report is None:
        return _no_report(spec, tolerance, truth)
    window = (f"{truth['steps']} timed steps in {truth['mean_ms'] * truth['steps'] / 1e3:.3f} s on the grader's "
              "clock, synchronized at both ends")
    if "mean_ms" not in report:
        return result(spec, FAILED, threshold=tolerance, measured={"grader": truth}, evidence=[
            f"the report has no mean_ms: the grader's mean is {truth['mean_ms']:.3f} ms per step ({window})"])
    off, line = compare("mean_ms", report["mean_ms"], truth["mean_ms"], tolerance)
    measured = {"reported_mean_ms": report["mean_ms"], "grader_mean_ms": truth["mean_ms"],
                "ratio": round(off, 3) if math.isfinite(off) else None, "grader": truth}
    if line:
        return result(spec, FAILED, measured=measured, threshold=tolerance, evidence=[line, window])
    return result(spec, PASSED, measured=measured, threshold=tolerance, evidence=[
        f"mean_ms {report['mean_ms']:.3f} ms reported, {truth['mean_ms']:.3f} ms measured ({window})"])


def window_step_ms(run) -> float | None:
    """A run's mean step time over its timed window (synchronized at both ends), on the grader's clock."""
    steps = len(run.step_ms)
    return run.window_s * 1e3 / steps if steps and run.window_s else None


def step_cost_ratio(pair, device: str) -> float | None:
    """The traced pair's mean step, the benchmark's over the slow script's: what step_cost holds to its allowance."""
    baseline, candidate = pair
    base_ms, cand_ms = window_step_ms(baseline), window_step_ms(candidate)
    return cand_ms / base_ms if base_ms and cand_ms is not None else None


@check("step_cost", needs=(RUN, TRACE, BASELINE_TRACE), key="ratio", fmt="{:.2f}x the baseline's step",
       traced_measure=step_cost_ratio)
def step_cost(evidence, spec):
    """measuring does not change what is measured: the benchmark's steps cost what the slow script's cost"""
    allowance = float(spec.threshold_for(evidence.device))
    pair = evidence.traced if evidence.traced is not None else evidence.timed[0]
    baseline, candidate = pair
    base_ms, cand_ms = window_step_ms(baseline), window_step_ms(candidate)
    if base_ms is None or cand_ms is None:
        return result(spec, FAILED, threshold=allowance, evidence=[
            "the grader timed no window of the benchmark or of the slow script beside it, so what measuring costs is unknown"])
    mean_ratio = cand_ms / base_ms
    measured = {"candidate_step_ms": round(cand_ms, 3), "baseline_step_ms": round(base_ms, 3),
                "mean_ratio": round(mean_ratio, 3), "ratio": round(mean_ratio, 3)}
    said = (f"a step took {cand_ms:.3f} ms in your benchmark and {base_ms:.3f} ms in the slow script, under the same "
            f"secret, both traced ({mean_ratio:.2f}x; allowed up to {allowance:.2f}x)")
    pairs = [(c, b) for c, b in zip(candidate.step_ms, baseline.step_ms) if b > 0]
    if evidence.device == "cpu" and pairs:
        # step by step too, where the grader's stamps are each step's own time (on a CPU an op has finished when its
        # call returns; on a GPU an unsynchronized step's stamps are its launches'): the same step trains the same
        # batch in both runs, so a short step stays short, and steps paced or padded to one beat make the short ones
        # (most of them) several times the slow script's, however a loaded machine moves the means
        ratios = [c / b for c, b in pairs]
        step_ratio = float(np.median(ratios))
        measured["upper_step_ratio"] = round(float(np.percentile(ratios, UPPER_STEPS * 100)), 3)
        median_allowance = float(spec.option_for("step_median", evidence.device, allowance))
        measured.update(median_step_ratio=round(step_ratio, 3), median_allowance=median_allowance)
        said += (f"; step by step, the median of each step's time over the slow script's same step is "
                 f"{step_ratio:.2f}x (allowed up to {median_allowance:.2f}x)")
        if step_ratio > median_allowance:
            return result(spec, FAILED, measured=measured, threshold=allowance, evidence=[
                said, "the benchmark made the steps it measured slower, step by step: a report may only observe the "
                "steps (a wait for the device, a clock read), never pace or pad them"])
    ratio, machine = measured["ratio"], _slowed_by_the_machine(evidence, pair, allowance, measured)
    if ratio > allowance and not machine:
        return result(spec, FAILED, measured=measured, threshold=allowance, evidence=[
            said, "the benchmark made the steps it measured slower: a report may only observe the steps (a wait for "
            "the device, a clock read), never pace or pad them"])
    if ratio > allowance:
        said += "; " + machine
    if (padded := _padded_steps(evidence, spec, measured)) is not None:
        return result(spec, FAILED, measured=measured, threshold=allowance, evidence=[said, padded])
    return result(spec, PASSED, measured=measured, threshold=allowance, evidence=[said])


def _slowed_by_the_machine(evidence, pair, allowance: float, measured: dict) -> str | None:
    """On a CPU: why a window mean above the allowance is the machine's and not the benchmark's, or None. The kernel
    counts the CPU time of every process under each run over its window (``RunResult.window_cpu_ns``); where the
    benchmark's steps used at most ``allowance`` times the slow script's CPU per step, the longer wall is time the run
    was not running: another process on a shared machine (a two-core CI runner moved one pair's means 1.58x apart
    while the per-step median stayed at 1.22x). A step padded by work of the run's own (a spin, a thread or a process
    of its own) costs CPU and fails here; a step padded by a wait (a sleep, a pipe, a lock) costs none and is what
    the per-step median and the idle margin judge, on the same traced steps. A wait inside a recorded op escapes the
    idle margin, so the excuse also needs the slowest fifth of the per-step ratios within the median's allowance."""
    if evidence.device != "cpu":
        return None
    baseline, candidate = pair
    if baseline.window_cpu_ns is None or candidate.window_cpu_ns is None:
        return None
    upper, median_allowance = measured.get("upper_step_ratio"), measured.get("median_allowance", allowance)
    if upper is None or upper > median_allowance:
        # a wait costs no CPU either, wherever it sits: inside a recorded op (a backward hook, a kernel of the script's
        # own), the idle margin cannot see it. A report's p50 moved into the long steps needs a quarter of all steps
        # (a third of the short ones) padded to the long step, and the slowest fifth of the per-step ratios then holds
        # padded steps only, several times the slow script's (red team 53's hookpad00: 19 of 30 short steps, 4x); a
        # machine's load moves them all, the long steps most, and keeps that fifth near the median's allowance
        return None
    base_cpu, cand_cpu = cpu_per_step([baseline], which=None), cpu_per_step([candidate], which=None)
    if base_cpu <= 0:
        return None
    cpu_ratio = cand_cpu / base_cpu
    measured["cpu_ratio"] = round(cpu_ratio, 3)
    if cpu_ratio > allowance:
        return None
    return (f"but its processes used {cand_cpu / 1e6:.1f} ms of CPU per step against the slow script's "
            f"{base_cpu / 1e6:.1f} ms ({cpu_ratio:.2f}x): the longer wall is time the machine ran something else")


def _padded_steps(evidence, spec, measured: dict) -> str | None:
    """On a CPU, where chapter.toml gives ``idle_margin``: why the traced steps held more time without an op on their
    own thread than the slow script's same steps, or None. An op has finished there when its call returns, so an
    honest step is its ops and a little Python between them (about 1% of a step, the slow script's and the
    solution's alike); a sleep, a loop on the clock or any wait of the script's own is time between ops. Pacing by
    less than step_cost's allowance stays inside the allowance, not inside this margin (red team 34's
    beat_report_00, each kind of step paced to 1.25x its first: 41% of a step's time without an op). On a GPU the
    host waits for the device, so time without a host op is no sign; no margin is set there."""
    margin = spec.option_for("idle_margin", evidence.device)
    if margin is None or evidence.device != "cpu":
        return None
    slow, missing = _trace_of(evidence, "baseline", "the slow script's run")
    mine, missing_too = (None, None) if missing else _trace_of(evidence, "candidate", "your run")
    if missing or missing_too:
        return missing or missing_too
    theirs, ours = uncovered_shares(slow.events, slow.get_steps()), uncovered_shares(mine.events, mine.get_steps())
    both = ours.index.intersection(theirs.index)
    if not len(both):
        return "your run's trace and the slow script's share no traced step, so what each step waited is unknown"
    idle, base = float(ours[both].mean()), float(theirs[both].mean())
    measured.update(idle_share=round(idle, 4), baseline_idle_share=round(base, 4))
    if idle - base <= float(margin):
        return None
    return (f"in {len(both)} traced steps, {idle:.0%} of a step's time ran no operator on the thread that ran the step, "
            f"against {base:.0%} in the slow script's same steps (allowed {float(margin):.0%} more): a benchmark's step "
            "is the training's ops and a clock read; time between them is a wait or a loop of the script's own (a "
            "sleep, a spin on the clock) that pads the steps it measures")


SHOWN_STEPS = 4  # the steps a failure names, the most different first


def _trace_of(evidence, role: str, who: str):
    """(a run's trace, why there is none)."""
    try:
        return evidence.trace(role), None
    except KeyError:
        return None, f"the grader holds no trace of {who}, so what each step trained is unknown"
    except TraceMismatch as err:
        return None, str(err)


def _added_work(mine, slow, spec, measured: dict, before: int | None = None) -> list[str]:
    """Where a chapter's fix never changes the training (``same_ops``): the evidence lines of the steps that ran work
    the slow script's same step does not (ops beyond its ops, bookkeeping aside, or more recorded input elements than
    its by more than ``extra_elements``), or []. A step made to last a chosen time with extra work is a report made
    true, whatever the work is. ``before``: the steps before this one only (the warm-up's, from a whole trace)."""
    margin = float(spec.options.get("extra_elements", 0.01))
    extra = extra_ops_by_step(mine, slow)
    which = "timed steps"
    if before is not None:
        extra, which = extra[extra["step"] < before], "warm-up steps"
    grown = extra["elements"] > extra["baseline_elements"] * (1 + margin) + 0.01  # millions: a few scalars' slack
    added = extra[np.array([bool(ops) for ops in extra["extra_ops"]], dtype=bool) | grown.to_numpy()]
    measured["warmup_steps_with_added_work" if before is not None else "steps_with_added_work"] = int(len(added))
    if added.empty:
        return []
    lines = [f"{len(added)} of {len(extra)} {which} ran work the slow script's step of the same number does not "
             "(ops beyond its ops, or more than "
             f"{margin:.0%} more recorded input elements): this chapter's fix changes how the steps are timed, never "
             "what they run, so work added to a step changes what is measured:"]
    for row in added.head(SHOWN_STEPS).itertuples():
        ops = ", ".join(f"{name} x{n}" for name, n in row.extra_ops.most_common(4))
        lines.append(f"step {row.step}: " + (f"ops {ops}; " if ops else "") +
                     f"{row.elements:.1f}M input elements vs {row.baseline_elements:.1f}M")
    if len(added) > SHOWN_STEPS:
        lines.append(f"... and {len(added) - SHOWN_STEPS} more step(s)")
    return lines


def _traced_work(trace, who: str, cap: float | None):
    """(a run's training work per traced step, why there is none)."""
    work = training_work(trace, cap)
    if work.empty:
        return None, (f"the trace of {who} recorded no matrix product with its shapes (torch.profiler with "
                      "record_shapes, which chapter.toml sets for this chapter), so what each step trained is unknown")
    return work, None


def _trained_elsewhere(evidence, spec, measured: dict) -> str | None:
    """Where a chapter gives ``helpers_cpu_share`` (its lesson needs no loader worker, so its slow script has none):
    on a CPU, why the run's other processes' CPU time per window step says they trained, or None. The kernel's count
    over every pair (``RunResult.window_cpu_ns``: the run's own process, then every other under it), against the slow
    script's training process. A loader worker that trains a copy of the model and hands its weights back with the
    batches, while the traced step runs the slow script's products on a decoy (red team 32's worker_trains_02), keeps
    a worker as busy as training; an honest worker only hands over batches held in memory."""
    share_max = spec.options.get("helpers_cpu_share")
    if share_max is None or evidence.device != "cpu":
        return None
    pooled = slow_cpu_pairs(evidence)
    if not pooled:
        return None
    helpers, slow = cpu_per_step([c for _, c in pooled], which=1), cpu_per_step([b for b, _ in pooled])
    if slow <= 0:
        return None
    share = helpers / slow
    measured["helpers_cpu_share"] = round(share, 3)
    if share <= float(share_max):
        return None
    return (f"the run's other processes (loader workers) used {helpers / 1e6:.1f} ms of CPU per window step, "
            f"{share:.0%} of the slow script's training process ({slow / 1e6:.1f} ms; allowed up to "
            f"{float(share_max):.0%}): this chapter's batches are ready in memory, so a worker that busy trained; the "
            "training process must train each batch itself")


@check("step_work", needs=(TRACE, BASELINE_TRACE), key="worst_off", fmt="{:.0%} off")
def step_work(evidence, spec):
    """every timed step runs its own batch's training between its two step stamps, as the slow script's step does"""
    tolerance = float(spec.threshold_for(evidence.device))
    if evidence.trace_tool != "torch":  # nsys records no op's shapes: the work cannot be counted, so nothing passes
        return result(spec, FAILED, threshold=tolerance, evidence=[
            f"step_work counts each step's matrix products from the shapes torch.profiler records; a {evidence.trace_tool} "
            "trace records none, so what each step trained is unknown: check with --trace-tool torch (the default)"])
    slow, missing = _trace_of(evidence, "baseline", "the slow script's run")
    mine, missing_too = (None, None) if missing else _trace_of(evidence, "candidate", "your run")
    if missing or missing_too:
        return result(spec, FAILED, threshold=tolerance, evidence=[missing or missing_too])
    cap = rate_cap([slow])
    baseline, missing = _traced_work(slow, "the slow script's run", cap)
    candidate, missing_too = (None, None) if missing else _traced_work(mine, "your run", cap)
    if missing or missing_too:
        if missing_too:  # the slow script's run, recorded the same way, showed its products
            missing_too += (f"; the slow script's run showed them in {len(baseline)} traced step(s) under the same "
                            "recording, so your run's steps ran no matrix product at all: the training ran where the "
                            "trace does not look (another process, a loader worker) or not at all")
        return result(spec, FAILED, threshold=tolerance, evidence=[missing or missing_too])
    same_products = bool(spec.options.get("same_products", False))
    both = work_by_step(candidate, baseline, tolerance, same_products)
    differs = both[both["differs"]]
    judged = both[both["traced"] == "both"]
    worst = judged.loc[judged["off"].idxmax()] if len(judged) else None
    measured = {"steps": int(len(judged)), "steps_differing": int(len(differs)),
                "worst_off": None if worst is None or not math.isfinite(worst["off"]) else round(float(worst["off"]), 4),
                "worst_step": None if worst is None else int(worst["step"]),
                "optimizer_steps_differing": int((judged["optimizer_steps"] != judged["baseline_optimizer_steps"]).sum()),
                "credited_up_to_gflops_per_s": None if cap is None else round(cap, 1),
                "steps_with_other_products": int(judged["products_differ"].sum())}
    if not len(judged):
        return result(spec, FAILED, measured=measured, threshold=tolerance, evidence=[
            "your run's trace and the slow script's share no traced step, so no step's work could be compared"])
    if (elsewhere := _trained_elsewhere(evidence, spec, measured)) is not None:
        return result(spec, FAILED, measured=measured, threshold=tolerance, evidence=[elsewhere])
    if len(differs):
        shown = differs.assign(order=differs["off"].fillna(np.inf)).sort_values(["order", "step"],
                                                                                ascending=[False, True])
        more = int(((differs["forward_off"] > tolerance) | (differs["backward_off"] > tolerance)).sum())
        less = int(((differs["forward_off"] < -tolerance) | (differs["backward_off"] < -tolerance)).sum())
        lines = [f"{len(differs)} of {len(both)} timed steps did other training work than the slow script's step of "
                 f"the same number, on the same batch ({more} more, {less} less; matrix-product FLOPs from the traces' "
                 f"recorded shapes, tolerance {tolerance:.0%}; optimizer steps counted"
                 + ("; each step's products size by size, as this chapter's fix leaves the training as the slow script "
                    "runs it" if same_products else "") + "):"]
        lines += [describe_step(row) for row in shown.head(SHOWN_STEPS).itertuples()]
        if len(differs) > SHOWN_STEPS:
            lines.append(f"... and {len(differs) - SHOWN_STEPS} more step(s)")
        lines.append(_credit_rule(cap))
        lines.append("a step is what runs from one step stamp to the next (each next() of session.steps()): its batch "
                     "must be trained there (forward, backward, one optimizer step), not split or queued into other "
                     "steps, or what is timed and traced per step is not the training's steps")
        return result(spec, FAILED, measured=measured, threshold=tolerance, evidence=lines)
    if spec.options.get("same_ops") and (added := _added_work(mine, slow, spec, measured)):
        return result(spec, FAILED, measured=measured, threshold=tolerance, evidence=added)
    warmup_lines, warmup_note = _warmup_work(evidence, spec, cap, tolerance, measured)
    if warmup_lines:
        return result(spec, FAILED, measured=measured, threshold=tolerance, evidence=warmup_lines)
    return result(spec, PASSED, measured=measured, threshold=tolerance, evidence=[
        f"each of the {len(judged)} timed steps trained its own batch: matrix-product FLOPs forward and backward within "
        f"{tolerance:.0%} of the slow script's same step (at most {float(judged['off'].max()):.1%} off), as many "
        "optimizer steps" + (", the same products size by size" if same_products else "") + warmup_note])


def _credit_rule(cap: float | None) -> str:
    """How a recorded product is credited with work, as a failure's evidence says it."""
    return "a product counts only the work it can have done: " + (
        f"at most its duration at {cap:.0f} GFLOP/s ({RATE_HEADROOM:g}x the best rate of the slow script's products "
        "in this check, or the machine's peak), and nothing where Python ran inside it (its time then is not its "
        "arithmetic)" if cap is not None else "one that launched a GPU kernel") + "; one on the meta device records its "\
        "shapes and computes nothing"


def _warmup_work(evidence, spec, cap: float | None, tolerance: float, measured: dict) -> tuple[list[str], str]:
    """Where the chapter traces the warm-up too (``trace_warmup``: chapter 00 on a CPU): (the evidence lines of the
    warm-up steps that trained other work than the slow script's same step, or []; a note for the passing line).

    A benchmark that counts its warm-up steps reports steps the grader does not time; on a CPU the warm-up's batches
    stand in for a GPU's cold start (long ones), so counting them shows, unless those steps were trained some cheaper
    way with the same result (red team 58's coldvocab_00 trained the long batches through a table of the vocabulary's
    features, exact, and its report over all 45 steps passed). Judged as the timed steps are: every warm-up step runs
    the slow script's products size by size (and its ops, where ``same_ops``)."""
    if not evidence.cfg.get("trace_warmup") or evidence.trace_tool != "torch":
        return [], ""
    first = int(evidence.cfg.get("warmup", 0))
    slow, mine = evidence.traces.get("baseline.warmup"), evidence.traces.get("candidate.warmup")
    if slow is None:  # the harness traces the warm-up of every run of this chapter: without it nothing is judged
        return [f"the slow script's trace holds none of its {first} warm-up steps, so what your warm-up trained cannot "
                "be compared with it"], ""
    if mine is None:
        return [f"your run's trace holds none of the {first} warm-up steps the slow script's trace holds (this chapter "
                "traces the warm-up as well, to see what it trained)"], ""
    expected = list(range(first))
    for trace, who in ((mine, "your run's"), (slow, "the slow script's")):
        found = sorted(int(s) for s in trace.get_steps()["step"] if int(s) < first)
        if found != expected:
            return [f"{who} trace holds warm-up step ranges {found[:8]}, but the harness ran steps 0..{first - 1} once "
                    "each: step ranges were added, removed or renamed"], ""
    same_products = bool(spec.options.get("same_products", False))
    baseline, candidate = (training_work(trace, cap) for trace in (slow, mine))
    baseline, candidate = baseline[baseline["step"] < first], candidate[candidate["step"] < first]
    both = work_by_step(candidate, baseline, tolerance, same_products)
    differs = both[both["differs"]]
    measured["warmup_steps_differing"] = int(len(differs))
    if len(differs):
        lines = [f"{len(differs)} of {first} warm-up steps trained other work than the slow script's step of the same "
                 "number, on the same batch (matrix-product FLOPs and each product's size, optimizer steps): the "
                 "warm-up is the training's too. This chapter's fix changes how the steps are timed, never what they "
                 "train, warm-up included; warm-up steps trained some other way would make a report that counts them "
                 "look like the timed steps:"]
        lines += [describe_step(row) for row in differs.head(SHOWN_STEPS).itertuples()]
        lines.append(_credit_rule(cap))
        return lines, ""
    if spec.options.get("same_ops") and (added := _added_work(mine, slow, spec, measured, before=first)):
        return added, ""
    return [], f"; and each of the {first} warm-up steps trained as the slow script's did"
