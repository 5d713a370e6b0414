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
  a correct benchmark on a busy machine, where a few slow steps sit among the long ones;
* ``mean_step_report``: its ``mean_ms`` is within the threshold of the grader's mean step time over the timed
  window. The window is synchronized at both ends by the harness, so this holds on a GPU whether or not the
  script waits for the device; a clock read right after queueing the work lands far below it.

The report reaches the grader as ``RunResult.reports`` (name -> number): the script calls
``session.report(name, value)``, which sends it over the grader's channel. It is untrusted: only the
comparison counts.
"""

from __future__ import annotations

import math

import numpy as np

from checker.checks import FAILED, PASSED, RUN, check, result

KNOWN = ("steps", "p50_ms", "p90_ms", "mean_ms")
PERCENTILES = {"p50_ms": 0.5, "p90_ms": 0.9}


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
            band: tuple[float, float] | None = None) -> tuple[float, str | None]:
    """(how many times off, a line of evidence when off by more than the tolerance). ``band`` is the range of
    right answers (see percentile_band); without it, ``truth`` is the one right answer."""
    if not math.isfinite(reported) or reported <= 0:
        return float("inf"), f"{name} is {reported!r}, not a positive number of milliseconds"
    low, high = band if band is not None else (truth, truth)
    nearest = min(max(reported, low), high)
    off = max(reported / nearest, nearest / reported)
    if abs(reported - nearest) <= tolerance * nearest:
        return off, None
    how = "faster than" if reported < nearest else "slower than"
    grader = f"{truth:.3f} ms" if low == high else f"{truth:.3f} ms (any of {low:.3f}-{high:.3f} ms, by method)"
    return off, (f"{name} {reported:.3f} ms vs the grader's {grader}: {off:.2f}x {how} the steps ran "
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


@check("step_time_report", needs=(RUN,), key="worst_ratio", fmt="{:.2f}x off", failure=report_failure)
def step_time_report(evidence, spec):
    """the lab's p50 and p90 step times agree with the grader's own stamps of the same steps"""
    tolerance = float(spec.threshold_for(evidence.device))
    run = evidence.candidate_run
    truth = grader_times(run)
    if not truth["steps"]:
        return result(spec, FAILED, threshold=tolerance, evidence=["the grader stamped no timed steps in this run"])
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
        band = percentile_band(run.step_ms, fraction)
        off, line = compare(name, report[name], truth[name], tolerance, band)
        ratios.append(off)
        if line:
            lines.append(line)
    measured = {"reported": {k: report[k] for k in KNOWN if k in report}, "grader": truth,
                "worst_ratio": round(max(ratios), 3) if ratios else None}
    if lines:
        return result(spec, FAILED, measured=measured, threshold=tolerance, evidence=lines + [_summary(truth)])
    return result(spec, PASSED, measured=measured, threshold=tolerance, evidence=[
        f"p50 {report['p50_ms']:.3f} ms and p90 {report['p90_ms']:.3f} ms reported; " + _summary(truth)])


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
