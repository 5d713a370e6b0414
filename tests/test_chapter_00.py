"""Chapter 00 (measuring right): a benchmark's report is held against the grader's clock.

The checks on fabricated runs (what the grader measured, what the run reported), then `workbook check` on a
CPU as CI runs it: the unmodified lab fails with evidence naming what to fix, the solution's report agrees.
"""

from pathlib import Path

import pytest

from checker.base.chapters import CheckSpec, get_chapter
from checker.checks import FAILED, PASSED
from checker.checks.evidence import Evidence
from checker.checks.step_report import (device_step_ms, grader_times, mean_step_report, read_report, step_cost,
                                        step_time_report, step_work)

CHAPTER = "00_measuring_right"
# what the grader stamped: 40 timed steps, three short (10 ms) then a long one (40 ms), a quarter of them long
STEPS = [40.0 if i % 4 == 3 else 10.0 for i in range(40)]


class FakeRun:
    def __init__(self, step_ms=STEPS, output_tail="", reports=None):
        self.step_ms, self.output_tail = list(step_ms), output_tail
        if reports is not None:
            self.reports = reports


def device_events(step_ms, first_step=10, gap_ms=0.0):
    """A trace's events for steps whose GPU work lasts ``step_ms`` each, back to back (``gap_ms`` idle between)."""
    import pandas as pd

    rows, at = [], 0
    for offset, ms in enumerate(step_ms):
        # two kernels per step, the first at the step's start, the last ending at its end
        half = int(ms * 1e6 / 2)
        rows.append(("kernel", at, at + half, first_step + offset))
        rows.append(("kernel", at + half, at + int(ms * 1e6), first_step + offset))
        rows.append(("cpu_op", at, at + 1000, first_step + offset))  # host work: not the device's time
        at += int((ms + gap_ms) * 1e6)
    return pd.DataFrame(rows, columns=["kind", "start_ns", "end_ns", "step"]).astype({"step": "Int64"})


class FakeTrace:
    gpu_clock_skew = None

    def __init__(self, events):
        self.events = events


def FakeEvaluation(run, device="cuda", device_ms=None):
    """The evidence of one traced candidate run, as the grader hands it to the checks; on a GPU its trace shows the
    device busy for ``device_ms`` per step (by default what the grader's stamps say)."""
    traces = {"candidate": FakeTrace(device_events(run.step_ms if device_ms is None else device_ms))}
    return Evidence(chapter=get_chapter(CHAPTER), device=device, trace_tool="torch", candidate=Path("train.py"),
                    cfg={"warmup": 10}, traced=(None, run), traces=traces if device == "cuda" else {})


def spec(name, tolerance=0.1, device="cuda"):
    return CheckSpec(name=name, doc=name, threshold={device: tolerance}, skip={}, options={})


def printed(**numbers):
    """What session.report() sends for these numbers, as the grader keeps it."""
    return {k: float(v) for k, v in numbers.items()}


def test_the_grader_summarizes_its_own_stamps():
    truth = grader_times(FakeRun())
    assert truth == {"steps": 40, "p50_ms": 10.0, "p90_ms": 40.0, "mean_ms": 17.5}


def test_a_report_arrives_over_the_channel_and_printing_one_is_not_reporting():
    assert read_report(FakeRun(reports={"p50_ms": 10, "steps": 40})) == {"p50_ms": 10.0, "steps": 40.0}
    assert read_report(FakeRun(output_tail="step time report: steps=40 p50_ms=10\n")) is None


def test_an_honest_synchronized_report_passes_both_checks():
    run = FakeRun(reports=printed(steps=40, p50_ms=10.3, p90_ms=39.1, mean_ms=17.4))
    assert step_time_report(FakeEvaluation(run), spec("step_time_report")).status == PASSED
    assert mean_step_report(FakeEvaluation(run), spec("mean_step_report")).status == PASSED


def test_a_clock_read_before_the_gpu_finished_is_caught_by_the_window():
    """Unsynchronized on a GPU: each step 'takes' the 0.4 ms it took to queue it; the window saw 17.5 ms."""
    from checker.base.chapters import get_chapter

    run = FakeRun(reports=printed(steps=40, p50_ms=0.4, p90_ms=0.5, mean_ms=0.42))
    outcome = mean_step_report(FakeEvaluation(run), spec("mean_step_report"))
    assert outcome.status == FAILED and outcome.measured["ratio"] == pytest.approx(17.5 / 0.42, rel=1e-3)
    assert "faster than the steps ran" in outcome.evidence[0]
    assert "synchronize" in get_chapter(CHAPTER).hint_ladder_for("mean_step_report", outcome.evidence).pattern


def test_a_mean_alone_over_every_step_names_what_is_missing():
    run = FakeRun(reports=printed(steps=50, mean_ms=22.0))  # warm-up included, no percentiles
    outcome = step_time_report(FakeEvaluation(run), spec("step_time_report"))
    assert outcome.status == FAILED
    assert outcome.evidence[0].startswith("the report covers 50 steps; the grader timed 40")
    assert any(line.startswith("the report has no p50_ms: the grader's p50 of the timed steps is 10.000 ms")
               for line in outcome.evidence)
    hint = get_chapter(CHAPTER).hint_ladder_for("step_time_report", outcome.evidence)
    assert "90th percentile" in hint.pattern


def test_any_common_percentile_method_is_right_and_the_band_is_no_wider():
    """On CI's 2-core machine the solution's statistics.quantiles said p90 75.6 ms where numpy's default said
    51.4 ms of the same steps (evidence/history/2026-11-23-ci-session5-failure.txt): the order statistics
    at ranks 35 and 36 of 40 lay far apart. A series of that shape: both methods are right, a mean or a p50
    for the p90 is not."""
    import statistics

    import numpy as np

    from checker.checks.step_report import percentile_band

    steps = [12.0] * 30 + [50.0] * 6 + [78.0] * 4
    low, high = percentile_band(steps, 0.9)
    assert (low, high) == (50.0, 78.0)
    methods = [float(np.percentile(steps, 90, method=m)) for m in ("linear", "weibull", "hazen", "inverted_cdf",
                                                                   "nearest", "lower", "higher", "median_unbiased")]
    methods.append(statistics.quantiles(steps, n=10)[-1])
    methods.append(statistics.quantiles(steps, n=10, method="inclusive")[-1])
    assert all(low <= value <= high for value in methods), methods
    for p90, status in ((statistics.quantiles(steps, n=10)[-1], PASSED), (float(np.percentile(steps, 90)), PASSED),
                        (80.0, PASSED), (95.0, FAILED), (statistics.fmean(steps), FAILED), (12.0, FAILED)):
        run = FakeRun(step_ms=steps, reports=printed(steps=40, p50_ms=12.0, p90_ms=p90, mean_ms=24.6))
        assert step_time_report(FakeEvaluation(run), spec("step_time_report")).status == status, p90
    assert percentile_band([5.0], 0.9) == (5.0, 5.0)
    assert percentile_band(steps, 0.5) == (12.0, 12.0)


def test_made_up_numbers_fail():
    for numbers in ({"steps": 40, "p50_ms": 1, "p90_ms": 1, "mean_ms": 1},
                    {"steps": 40, "p50_ms": 17.5, "p90_ms": 17.5, "mean_ms": 17.5},  # the mean for every number
                    {"steps": 40, "p50_ms": -10, "p90_ms": 40, "mean_ms": 17.5}):
        outcome = step_time_report(FakeEvaluation(FakeRun(reports=numbers)), spec("step_time_report"))
        assert outcome.status == FAILED, numbers


def test_no_report_is_a_failure_that_says_how_to_report():
    outcome = step_time_report(FakeEvaluation(FakeRun(output_tail="done\n")), spec("step_time_report"))
    assert outcome.status == FAILED and "session.report(name, value)" in outcome.evidence[0]


@pytest.mark.parametrize("check, numbers, says", [
    ("step_time_report", None, "session.report"),                                    # nothing reported
    ("step_time_report", {"steps": 40, "p50_ms": 0.0, "p90_ms": 40, "mean_ms": 17.5}, "milliseconds"),
    ("step_time_report", {"steps": 50, "mean_ms": 17.5}, "90th percentile"),        # a mean alone, warm-up in
    ("step_time_report", {"steps": 50, "p50_ms": 10, "p90_ms": 40, "mean_ms": 17.5}, "warm-up steps out"),
    ("step_time_report", {"steps": 40, "p50_ms": 30, "p90_ms": 90, "mean_ms": 50}, "outside the timed region"),
    ("step_time_report", {"steps": 40, "p50_ms": 0.4, "p90_ms": 0.5, "mean_ms": 0.42}, "synchronize"),
    ("mean_step_report", None, "session.report"),
    ("mean_step_report", {"steps": 40, "p50_ms": 10, "p90_ms": 40}, "statistics.fmean"),
    ("mean_step_report", {"steps": 40, "p50_ms": 10, "p90_ms": 40, "mean_ms": 0.42}, "synchronize"),
    ("mean_step_report", {"steps": 40, "p50_ms": 10, "p90_ms": 40, "mean_ms": 60}, "after the warm-up"),
])
def test_every_way_a_report_fails_gets_a_hint_about_it(check, numbers, says):
    """Each failing case of the two report checks leads to the hint that speaks to it, not the catch-all."""
    run = FakeRun(output_tail="done\n") if numbers is None else FakeRun(reports=printed(**numbers))
    outcome = {"step_time_report": step_time_report, "mean_step_report": mean_step_report}[check](
        FakeEvaluation(run), spec(check))
    assert outcome.status == FAILED
    hint = get_chapter(CHAPTER).hint_ladder_for(check, outcome.evidence)
    assert says in hint.pattern, (outcome.evidence, hint.nudge)


@pytest.mark.slow
def test_unmodified_lab_fails_on_cpu_naming_warmup_and_percentiles(graded):
    report = graded(CHAPTER, "lab")
    check = next(c for c in report.checks if c.name == "step_time_report")
    assert check.status == FAILED and check.hint
    assert any("the report covers 45 steps; the grader timed 40" in line for line in check.evidence), check.evidence
    assert any("no p50_ms" in line for line in check.evidence) and any("no p90_ms" in line for line in check.evidence)
    assert next(c for c in report.checks if c.name == "mean_step_report").status != "skipped"  # graded on a CPU too


@pytest.mark.slow
def test_solution_report_agrees_with_the_grader_on_cpu(graded):
    report = graded(CHAPTER, "solution")
    work = next(c for c in report.checks if c.name == "step_work")
    assert work.status == PASSED and work.measured["warmup_steps_differing"] == 0, work.evidence
    assert "each of the 5 warm-up steps trained as the slow script's did" in work.evidence[0]  # the warm-up, traced
    check = next(c for c in report.checks if c.name == "step_time_report")
    assert check.status == PASSED, check.evidence
    reported, truth = check.measured["reported"], check.measured["grader"]
    assert reported["steps"] == truth["steps"] == 40
    # the long batches: the series jitters (p90 about 2x p50 on an idle 2-core machine; on one loaded by other jobs,
    # a clean-clone CI run beside other jobs on 2026-11-27, 1.17x: every step waits for a core, so only the order)
    assert reported["p90_ms"] > reported["p50_ms"] and truth["p90_ms"] > truth["p50_ms"]


# ---- issue 43: the truth per step on a GPU is the device's, and measuring must not change the steps -------------
def test_the_devices_time_per_step_runs_from_one_steps_first_gpu_work_to_the_next():
    events = device_events([10.0, 40.0, 10.0], gap_ms=1.0)
    assert device_step_ms(events) == pytest.approx([11.0, 41.0, 10.0])
    assert device_step_ms(events[events["kind"] == "cpu_op"]) == []


def test_a_benchmark_that_waits_every_fourth_step_agrees_with_host_stamps_but_not_with_the_device():
    """Three steps in four time their queueing (2 ms), the fourth the backlog; the host stamps the same moments."""
    host = [2.0, 2.0, 2.0, 64.0] * 10
    run = FakeRun(step_ms=host, reports=printed(steps=40, p50_ms=2.0, p90_ms=64.0, mean_ms=17.5))
    assert step_time_report(FakeEvaluation(run, device="cpu"), spec("step_time_report", device="cpu")).status == PASSED
    outcome = step_time_report(FakeEvaluation(run, device_ms=STEPS), spec("step_time_report"))
    assert outcome.status == FAILED and outcome.measured["truth"].startswith("the device's own time")
    assert any("p50_ms 2.000 ms" in line for line in outcome.evidence), outcome.evidence


def test_on_a_gpu_a_trace_without_device_work_decides_nothing_and_says_so():
    run = FakeRun(reports=printed(steps=40, p50_ms=10.0, p90_ms=40.0, mean_ms=17.5))
    evidence = FakeEvaluation(run)
    empty = Evidence(chapter=evidence.chapter, device="cuda", trace_tool="torch", candidate=Path("train.py"),
                     cfg={"warmup": 10}, traced=(None, run), traces={"candidate": FakeTrace(device_events([]))})
    outcome = step_time_report(empty, spec("step_time_report"))
    assert outcome.status == FAILED and "device's time per step is unknown" in outcome.evidence[0]


class Windowed(FakeRun):
    def __init__(self, step_ms, window_s, cpu_ns=None):
        super().__init__(step_ms=step_ms)
        self.window_s, self.window_cpu_ns = window_s, cpu_ns  # (its own process, every other under it)


def cost(candidate_window_s, baseline_window_s=0.7, allowance=1.5):
    pair = (Windowed(STEPS, baseline_window_s), Windowed(STEPS, candidate_window_s))
    evidence = Evidence(chapter=get_chapter(CHAPTER), device="cpu", trace_tool="torch", candidate=Path("train.py"),
                        cfg={"warmup": 10}, traced=pair)
    return step_cost(evidence, spec("step_cost", allowance, device="cpu"))


def test_a_benchmark_that_paces_its_steps_to_a_beat_costs_more_than_the_slow_script_and_fails():
    """Paced to the long step (40 ms) every step: 1.6 s for 40 steps against the slow script's 0.7 s."""
    paced = cost(1.6)
    assert paced.status == FAILED and paced.measured["ratio"] == pytest.approx(1.6 / 0.7, rel=1e-3)
    assert "made the steps it measured slower" in paced.evidence[1]
    assert cost(0.72).status == PASSED
    assert cost(0.72, baseline_window_s=0).status == FAILED  # no baseline window: unknown, never a pass


def test_on_a_cpu_a_window_the_machine_slowed_passes_where_one_that_worked_longer_fails():
    """A two-core CI runner once moved an honest pair's means 1.58x apart (per-step median 1.22x): the benchmark's
    processes used no more CPU per step than the slow script's, so the machine ran something else. Steps made longer
    by CPU work of the run's own (a spin, a thread, a process under it) cost CPU as well, and fail; on a GPU, where
    the host waits for the device, the CPU count is not read."""
    slowed = [ms * 1.6 if ms > 10 else ms * 1.2 for ms in STEPS]  # the long steps hit hardest, as in that run

    def judged(cpu_ns, device="cpu", steps=slowed):
        baseline = Windowed(STEPS, sum(STEPS) / 1e3, (400_000_000, 0))
        candidate = Windowed(steps, sum(steps) / 1e3, cpu_ns)
        evidence = Evidence(chapter=get_chapter(CHAPTER), device=device, trace_tool="torch",
                            candidate=Path("train.py"), cfg={"warmup": 10}, traced=(baseline, candidate))
        checked = CheckSpec(name="step_cost", doc="", threshold={device: 1.3}, skip={}, options={"step_median": 2.0})
        return step_cost(evidence, checked)

    machine = judged((390_000_000, 20_000_000))
    assert machine.measured["mean_ratio"] > 1.3 and machine.measured["cpu_ratio"] == pytest.approx(1.025)
    assert machine.status == PASSED and "the machine ran something else" in machine.evidence[0]
    for worked in ((600_000_000, 0), (400_000_000, 200_000_000)):  # its own process, or a helper of its own
        outcome = judged(worked)
        assert outcome.status == FAILED and outcome.measured["cpu_ratio"] == pytest.approx(1.5), outcome.evidence
    assert judged(None).status == FAILED  # no CPU count: the wall decides
    # a wait inside a recorded op costs no CPU and no idle time either (red team 53's hookpad00, a sleep in a backward
    # hook): 11 of the 30 short steps padded to the long step's 40 ms move the p50 into the long steps, and the
    # slowest fifth of the per-step ratios is then 4x, which no machine's load makes of the median's 1x
    short = [n for n, ms in enumerate(STEPS) if ms == 10][:11]
    padded = [40.0 if n in short else ms for n, ms in enumerate(STEPS)]
    hooked = judged((400_000_000, 0), steps=padded)
    assert hooked.measured["median_step_ratio"] == 1.0 and hooked.measured["upper_step_ratio"] == 4.0
    assert hooked.status == FAILED and hooked.measured["mean_ratio"] > 1.3, hooked.evidence
    gpu = judged((390_000_000, 20_000_000), device="cuda")
    assert gpu.status == FAILED and "cpu_ratio" not in gpu.measured


def test_on_a_cpu_steps_paced_to_a_beat_fail_step_by_step_though_a_loaded_baseline_hides_the_mean():
    """The slow script's run slowed by load (each step 1.6x), so the paced run's mean is within the allowance; its
    short steps, paced to the long step's 40 ms, are each several times the slow script's same step."""
    loaded = [ms * 1.6 for ms in STEPS]
    paced = [40.0] * len(STEPS)
    pair = (Windowed(loaded, sum(loaded) / 1e3), Windowed(paced, sum(paced) / 1e3))
    evidence = Evidence(chapter=get_chapter(CHAPTER), device="cpu", trace_tool="torch", candidate=Path("train.py"),
                        cfg={"warmup": 10}, traced=pair)
    outcome = step_cost(evidence, spec("step_cost", 1.5, device="cpu"))
    assert outcome.measured["mean_ratio"] < 1.5 < outcome.measured["median_step_ratio"]
    assert outcome.status == FAILED and "step by step" in outcome.evidence[0]
    honest = (Windowed(loaded, sum(loaded) / 1e3), Windowed(STEPS, sum(STEPS) / 1e3))
    evidence = Evidence(chapter=get_chapter(CHAPTER), device="cpu", trace_tool="torch", candidate=Path("train.py"),
                        cfg={"warmup": 10}, traced=honest)
    assert step_cost(evidence, spec("step_cost", 1.5, device="cpu")).status == PASSED


def test_on_a_cpu_a_loaded_honest_run_passes_step_by_step_where_a_paced_one_still_fails():
    """The chapter's own allowances. Load on a shared machine slowed an honest benchmark's short steps more than its
    long ones (red team 45 saw the solution's median at 1.51x, its means at 1.36x): within step_median. Steps paced
    to the long step's beat make each short one 4x the slow script's: far above it."""
    chapter_spec = get_chapter(CHAPTER).check("step_cost")
    options = {k: v for k, v in chapter_spec.options.items() if k != "idle_margin"}  # no traces in this test
    judged = CheckSpec(name="step_cost", doc="step_cost", threshold=chapter_spec.threshold, skip={}, options=options)
    loaded = [ms * 1.6 if ms < 40 else ms for ms in STEPS]

    def judge(candidate):
        pair = (Windowed(STEPS, sum(STEPS) / 1e3), Windowed(candidate, sum(candidate) / 1e3))
        return step_cost(Evidence(chapter=get_chapter(CHAPTER), device="cpu", trace_tool="torch",
                                  candidate=Path("train.py"), cfg={"warmup": 10}, traced=pair), judged)

    honest = judge(loaded)
    assert honest.status == PASSED, honest.evidence
    assert honest.measured["median_step_ratio"] > chapter_spec.threshold_for("cpu") > honest.measured["mean_ratio"]
    paced = judge([40.0] * len(STEPS))
    assert paced.status == FAILED and paced.measured["median_step_ratio"] > paced.measured["median_allowance"]


def _traced_steps(path, pad: float):
    """A CPU trace of four steps of products, each slept ``pad`` times its own time after its ops (0: not paced)."""
    import time

    import torch
    from torch.profiler import profile, record_function

    from checker.trace import load

    x = torch.randn(192, 192)
    with profile(with_stack=True) as prof:
        for step in range(10, 14):
            with record_function(f"step {step}"):
                start = time.perf_counter()
                for _ in range(30):
                    x @ x
                if pad:
                    time.sleep(pad * (time.perf_counter() - start))
    prof.export_chrome_trace(str(path))
    return load(path)


def test_on_a_cpu_steps_padded_between_their_ops_fail_step_cost_inside_the_allowance(tmp_path):
    """Slept a third of its time after its ops, each step costs 1.33x, inside the allowance; the trace shows that time
    ran no op on the step's thread, against about none in the honest steps (red team 34's beat_report_00)."""
    from checker.trace.analyses.ops import uncovered_shares

    honest, padded = _traced_steps(tmp_path / "honest.json", 0), _traced_steps(tmp_path / "padded.json", 0.33)
    assert uncovered_shares(honest.events, honest.get_steps()).mean() < 0.1
    assert uncovered_shares(padded.events, padded.get_steps()).mean() > 0.2
    window = [10.0] * 4
    checked = CheckSpec(name="step_cost", doc="", threshold={"cpu": 1.5}, skip={}, options={"idle_margin": 0.1})

    def judged(candidate):
        evidence = Evidence(chapter=get_chapter(CHAPTER), device="cpu", trace_tool="torch", candidate=Path("train.py"),
                            cfg={"warmup": 10}, traced=(Windowed(window, 0.04), Windowed(window, 0.04)),
                            traces={"baseline": honest, "candidate": candidate})
        return step_cost(evidence, checked)

    assert judged(honest).status == PASSED
    outcome = judged(padded)
    assert outcome.status == FAILED and "ran no operator on the thread that ran the step" in outcome.evidence[1]
    assert outcome.measured["idle_share"] > 0.2 > outcome.measured["baseline_idle_share"]


def test_step_cost_is_declared_for_both_devices():
    declared = get_chapter(CHAPTER).check("step_cost")
    assert 1 < float(declared.threshold_for("cpu")) < 2.3 and 1 < float(declared.threshold_for("cuda")) < 2.3


# ---- step_work: each step's interval holds that step's own training, counted from the traces ---------------------
def _pieces(model, optimizer, batch, pieces):
    """One batch's training as ``pieces`` closures of equal rows: zero_grad before the first, step after the last."""
    import torch.nn.functional as F

    tokens, labels = batch

    def part(i):
        def run():
            if i == 0:
                optimizer.zero_grad(set_to_none=True)
            logits = model(tokens.chunk(pieces)[i]).mean(dim=1)
            (F.cross_entropy(logits, labels.chunk(pieces)[i]) / pieces).backward()
            if i == pieces - 1:
                optimizer.step()
        return run
    return [part(i) for i in range(pieces)]


def _meta_padded(model, optimizer, batch, long):
    """One long batch trained on a quarter of its rows, the other rows' products replayed on a meta copy of the
    model (their shapes recorded, nothing computed), as evidence/redteam/2026-12-02-session52-open/meta_flops_00
    does; a short batch trained whole."""
    import copy

    import torch.nn.functional as F

    tokens, labels = batch
    optimizer.zero_grad(set_to_none=True)
    real = len(tokens) // 4 if long else len(tokens)
    F.cross_entropy(model(tokens[:real]).mean(dim=1), labels[:real]).backward()
    if real < len(tokens):
        ghost = copy.deepcopy(model).to("meta")
        F.cross_entropy(ghost(tokens[real:].to("meta")).mean(dim=1), labels[real:].to("meta")).backward()
    optimizer.step()


def recorded(path, split=False, queued=False, shapes=True, meta=False, size=(16, 32, 6), padded=False):
    """A real CPU trace (torch.profiler) of 8 steps of a small token model on batches of 8 rows, every fourth
    24 tokens long and the others 6, each step ranged ``step N`` as the harness ranges it. ``split``: a long batch
    is trained as four micro-batches of 2 rows (48 tokens each, as many as a short batch); ``queued``: the pieces
    wait in a queue and every step runs two of them (the last step runs what is left), as
    tests/redteam/cheats/queued_steps_00 does; ``meta``: a long batch trained on a quarter of its rows, the rest
    replayed on the meta device (``_meta_padded``). ``size``: features, hidden width and a short batch's tokens (a long one's 4x).
    ``padded``: every step also runs an elementwise op over a tensor of its own, as a step padded to a beat with real
    work does (tests/redteam/cheats/opbeat_00)."""
    from collections import deque

    import torch
    from torch import nn

    from checker.trace import load

    torch.manual_seed(0)
    features, hidden, short = size
    model = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(8, 4 * short if i % 4 == 3 else short, features), torch.randint(0, 4, (8,)))
               for i in range(8)]
    pending = deque()
    pad = torch.ones(4096)
    with torch.profiler.profile(record_shapes=shapes) as prof:
        for step, batch in enumerate(batches):
            with torch.profiler.record_function(f"step {step}"):
                if meta:
                    _meta_padded(model, optimizer, batch, long=step % 4 == 3)
                    continue
                pending.extend(_pieces(model, optimizer, batch, 4 if (split or queued) and batch[0].shape[1] > 6 else 1))
                budget = min(2, len(pending)) if queued and step < len(batches) - 1 else len(pending)
                for _ in range(budget):
                    pending.popleft()()
                if padded:
                    pad.mul_(1.0)
    prof.export_chrome_trace(str(path))
    return load(path)


def declared(name):
    """The check as chapter.toml declares it (its CPU threshold)."""
    return get_chapter(CHAPTER).check(name)


def flops_only():
    """step_work as chapter 00 declares it, its products' sizes and its ops not compared (FLOPs and optimizer steps
    alone)."""
    import dataclasses

    spec = declared("step_work")
    return dataclasses.replace(spec, options={k: v for k, v in spec.options.items()
                                              if k not in ("same_products", "same_ops")})


def work_evidence(candidate, baseline):
    return Evidence(chapter=get_chapter(CHAPTER), device="cpu", trace_tool="torch", candidate=Path("train.py"),
                    cfg={"warmup": 0}, traced=(None, None), traces={"candidate": candidate, "baseline": baseline})


def test_training_work_counts_each_steps_products_forward_and_backward_and_its_optimizer_steps(tmp_path):
    from checker.trace.analyses.work import training_work

    work = training_work(recorded(tmp_path / "honest.json"))
    assert work["step"].tolist() == list(range(8)) and work["optimizer_steps"].tolist() == [1] * 8
    short, long = work.loc[0], work.loc[3]
    # 8 x 6 tokens through 16 -> 32 -> 4: forward 2 * 48 * (16 * 32 + 32 * 4); the backward's weight gradients of
    # both layers and the input gradient of the second (the tokens need none)
    assert short["forward_flops"] == 2 * 48 * (16 * 32 + 32 * 4)
    assert short["backward_flops"] == 2 * 48 * (16 * 32 + 32 * 4) + 2 * 48 * 32 * 4
    assert long["forward_flops"] == 4 * short["forward_flops"] and long["backward_flops"] == 4 * short["backward_flops"]


def test_a_queue_of_equal_pieces_moves_work_between_steps_and_each_step_that_differs_is_named(tmp_path):
    """The queue runs 1, 1, 1, 2, 2, 2, 1, 4 pieces of a short batch's size; the batches are 1, 1, 1, 4, 1, 1, 1, 4.
    So step 3 did half its long batch, steps 4 and 5 twice their short one; step 3 ran no optimizer step, step 5
    two."""
    from checker.trace.analyses.work import training_work, work_by_step

    honest, queued = recorded(tmp_path / "honest.json"), recorded(tmp_path / "queued.json", queued=True)
    both = work_by_step(training_work(queued), training_work(honest), 0.05)
    differing = both[both["differs"]]
    assert differing["step"].tolist() == [3, 4, 5]
    assert differing["forward_off"].tolist() == pytest.approx([-0.5, 1.0, 1.0])
    assert differing["backward_off"].tolist() == pytest.approx([-0.5, 1.0, 1.0])
    assert differing["optimizer_steps"].tolist() == [0, 1, 2] and set(differing["baseline_optimizer_steps"]) == {1}

    outcome = step_work(work_evidence(queued, honest), flops_only())
    assert outcome.status == FAILED and outcome.measured["steps_differing"] == 3
    assert outcome.measured["worst_off"] == pytest.approx(1.0) and outcome.measured["worst_step"] == 4
    assert "3 of 8 timed steps" in outcome.evidence[0] and "2 more, 1 less" in outcome.evidence[0]
    assert any(line.startswith("step 3: forward") and "(-50%)" in line and "0 optimizer step(s) vs 1" in line
               for line in outcome.evidence), outcome.evidence
    hint = get_chapter(CHAPTER).hint_ladder_for("step_work", outcome.evidence)
    assert "next()" in hint.pattern


def test_a_step_padded_with_ops_fails_where_the_fix_leaves_the_training_as_it_was(tmp_path):
    """Chapter 00's fix changes how the steps are timed, never what they run: a step padded with an elementwise op
    (the same training, the same products) runs an op the slow script's step does not, and more input elements. The
    honest run of the same training passes; each padded step is named."""
    honest, again = recorded(tmp_path / "honest.json"), recorded(tmp_path / "again.json")
    padded = recorded(tmp_path / "padded.json", padded=True)
    assert step_work(work_evidence(again, honest), declared("step_work")).status == PASSED
    outcome = step_work(work_evidence(padded, honest), declared("step_work"))
    assert outcome.status == FAILED and outcome.measured["steps_with_added_work"] == 8, outcome.evidence
    assert "8 of 8 timed steps ran work the slow script's step" in outcome.evidence[0]
    assert any(line.startswith("step 0: ops aten::mul_ x1") for line in outcome.evidence), outcome.evidence


def warmup_evidence(candidate_path, baseline_path, warmup=4):
    """Chapter 00 on a CPU traces the warm-up too (trace_warmup): the window's traces as the grader splits them off,
    and the whole traces beside them."""
    from checker.trace.analysis import load_after_warmup

    (mine, mine_whole), (slow, slow_whole) = (load_after_warmup(p, warmup) for p in (candidate_path, baseline_path))
    return Evidence(chapter=get_chapter(CHAPTER), device="cpu", trace_tool="torch", candidate=Path("train.py"),
                    cfg={"warmup": warmup, "trace_warmup": True}, traced=(None, None),
                    traces={"candidate": mine, "baseline": slow, "candidate.warmup": mine_whole,
                            "baseline.warmup": slow_whole})


def test_a_trace_of_the_warm_up_too_splits_into_the_window_a_trace_started_there_would_hold(tmp_path):
    """The window's trace holds nothing that started before the last warm-up step's range ended: the window's rules
    (nothing foreign before the first step's range, the span against the grader's stamps) read what they read when the
    profiler started at the window."""
    from checker.grader.collect import outside_the_steps
    from checker.trace.analysis import load_after_warmup

    recorded(tmp_path / "honest.json")
    window, whole = load_after_warmup(tmp_path / "honest.json", 4)
    assert whole.get_steps()["step"].tolist() == list(range(8))
    steps = window.get_steps()
    assert steps["step"].tolist() == [4, 5, 6, 7]
    cut = int(whole.get_steps().iloc[3]["end_ns"])
    ops = window.events[window.events["kind"] != "python"]
    assert int(ops["start_ns"].min()) >= cut and len(ops) < len(whole.events[whole.events["kind"] != "python"])
    assert outside_the_steps(window.events, steps) is None
    assert outside_the_steps(whole.events, steps) is not None  # the warm-up's ops, before the window's first step
    # a trace of the window alone has no warm-up to split off
    alone, none = load_after_warmup(tmp_path / "honest.json", 0)
    assert none is None and alone.get_steps()["step"].tolist() == list(range(8))


def test_warm_up_steps_trained_some_cheaper_way_fail_step_work_where_the_warm_up_is_traced(tmp_path):
    """Red team 58's coldvocab_00 trained the warm-up's long batches through a table (the same result, far less work)
    and reported all 45 steps: on a CPU the warm-up is traced and each of its steps held to the slow script's. Here
    the candidate's warm-up trains step 3's long batch as micro-batches (other products), its window as the slow
    script's; the honest run passes, a run whose trace holds no warm-up fails."""
    recorded(tmp_path / "honest.json")
    recorded(tmp_path / "again.json")
    recorded(tmp_path / "split.json", split=True)  # long steps 3 (warm-up) and 7 (window) as micro-batches
    honest = step_work(warmup_evidence(tmp_path / "again.json", tmp_path / "honest.json"), declared("step_work"))
    assert honest.status == PASSED and "each of the 4 warm-up steps trained as the slow script's did" in honest.evidence[0]

    import dataclasses

    evidence = warmup_evidence(tmp_path / "split.json", tmp_path / "honest.json")
    window_only = dict(evidence.traces, candidate=evidence.traces["baseline"])  # the window honest, the warm-up not
    outcome = step_work(dataclasses.replace(evidence, traces=window_only), declared("step_work"))
    assert outcome.status == FAILED and outcome.measured["warmup_steps_differing"] == 1, outcome.evidence
    assert outcome.evidence[0].startswith("1 of 4 warm-up steps trained other work")
    assert any(line.startswith("step 3: ") for line in outcome.evidence)

    no_warmup = {k: v for k, v in evidence.traces.items() if k != "candidate.warmup"}
    no_warmup["candidate"] = evidence.traces["baseline"]
    outcome = step_work(dataclasses.replace(evidence, traces=no_warmup), declared("step_work"))
    assert outcome.status == FAILED and "holds none of the 4 warm-up steps" in outcome.evidence[0]


def test_the_same_training_passes_and_micro_batches_within_their_own_step_are_the_same_work(tmp_path):
    honest = recorded(tmp_path / "honest.json")
    again = recorded(tmp_path / "again.json")
    split = recorded(tmp_path / "split.json", split=True)  # gradient accumulation inside the step: same FLOPs
    for candidate in (again, split):
        outcome = step_work(work_evidence(candidate, honest), flops_only())
        assert outcome.status == PASSED, outcome.evidence
        assert outcome.measured["steps"] == 8 and outcome.measured["worst_off"] == pytest.approx(0.0)
    # chapter 00's fix leaves the training as the slow script runs it, so its step_work compares each step's products
    # size by size: the same rows in four micro-batches are products of other sizes (the long steps, 3 and 7)
    assert step_work(work_evidence(again, honest), declared("step_work")).status == PASSED
    outcome = step_work(work_evidence(split, honest), declared("step_work"))
    assert outcome.status == FAILED and outcome.measured["steps_with_other_products"] == 2, outcome.evidence
    assert any("sizes the slow script's step does not run" in line for line in outcome.evidence)


def test_products_replayed_on_the_meta_device_record_shapes_but_are_credited_only_their_time(tmp_path):
    """A meta product's recorded shapes count the FLOPs of the slow script's step, and it computes nothing: on a CPU
    trace a product is credited at most its duration at RATE_HEADROOM times the slow script's best rate."""
    from checker.trace.analyses.collectives import RATE_HEADROOM, best_matmul_rate, matmul_work, peak_rate, rate_cap

    # products large enough that a CPU's time follows their FLOPs (a tiny one's time is the call's overhead)
    size = (256, 1024, 96)
    honest = recorded(tmp_path / "honest.json", size=size)
    padded = recorded(tmp_path / "padded.json", meta=True, size=size)
    recorded_flops = matmul_work(padded)
    assert recorded_flops["matmul_flops"].tolist() == matmul_work(honest)["matmul_flops"].tolist()  # the claim
    cap = rate_cap([honest])
    assert cap == pytest.approx(max(RATE_HEADROOM * best_matmul_rate(honest), peak_rate()))
    outcome = step_work(work_evidence(padded, honest), declared("step_work"))
    assert outcome.status == FAILED, outcome.evidence
    # the short steps trained whole; the long ones (3 and 7) did a quarter of their products for real
    assert outcome.measured["steps_differing"] == 2 and outcome.measured["worst_step"] in (3, 7)
    assert outcome.measured["credited_up_to_gflops_per_s"] == pytest.approx(round(cap, 1))
    assert any("meta device" in line for line in outcome.evidence)
    again = step_work(work_evidence(recorded(tmp_path / "again.json", size=size), honest), declared("step_work"))
    assert again.status == PASSED and again.measured["worst_off"] == pytest.approx(0.0), again.evidence


def test_a_product_with_python_running_inside_it_is_credited_nothing_on_a_cpu(tmp_path):
    """A meta product made to last (autograd's anomaly mode formats a Python traceback inside every op: red team 60's
    nodepad_00 credited its warm-up's replayed products so) has Python inside its span on its own thread: credited
    nothing, however long it lasted. A real product beside it, with none inside, keeps its credit."""
    import torch

    from checker.trace import load
    from checker.trace.analyses.collectives import matmul_work

    a, b = torch.randn(256, 512), torch.randn(512, 256)
    ghost_a, ghost_b = a.to("meta").requires_grad_(), b.to("meta")
    with torch.profiler.profile(record_shapes=True, with_stack=True) as prof:
        with torch.profiler.record_function("step 0"):
            torch.mm(a, b)  # real: 2 * 256 * 512 * 256 FLOPs
        with torch.profiler.record_function("step 1"), torch.autograd.set_detect_anomaly(True):
            torch.mm(ghost_a, ghost_b)  # the same shapes on the meta device, a traceback taken inside it
    prof.export_chrome_trace(str(tmp_path / "anomaly.json"))
    trace = load(tmp_path / "anomaly.json")
    claimed = matmul_work(trace)
    assert claimed["matmul_flops"].tolist() == [2 * 256 * 512 * 256] * 2  # the shapes claim the same work
    credited = matmul_work(trace, rate_cap=1e9)  # a cap no product's time limits
    assert credited["matmul_flops"].tolist() == [2 * 256 * 512 * 256, 0.0], credited


def test_the_credited_rate_has_a_floor_where_a_busy_machine_slowed_every_product_of_the_slow_script():
    """Red team 35 saw the cap at 0.3 GFLOP/s once, every honest product then credited a few percent of its FLOPs."""
    from types import SimpleNamespace

    from tests.trace.trace_helpers import make_events

    from checker.trace.analyses.collectives import RATE_HEADROOM, peak_rate, rate_cap

    def slow(rate):  # products of 1 MFLOP each, at ``rate`` FLOPs per ns
        return SimpleNamespace(events=make_events([]), meta={"matmuls": {"flops": [1e6] * 4, "dur_ns": [1e6 / rate] * 4}})

    assert rate_cap([slow(0.1)]) == peak_rate()  # the machine's peak: no honest product is faster
    fast = 2 * peak_rate() / RATE_HEADROOM  # a slow script whose products ran near the peak (a many-core machine)
    assert rate_cap([slow(fast)]) == pytest.approx(RATE_HEADROOM * fast)


def test_on_a_gpu_trace_a_product_counts_only_where_it_launched_a_kernel():
    import numpy as np

    from tests.trace.trace_helpers import make_events

    from checker.trace.analyses.collectives import credited_flops

    events = make_events([
        {"kind": "cuda_api", "name": "cudaLaunchKernel", "start_ns": 110, "end_ns": 120, "tid": 1, "correlation": 7},
        {"kind": "kernel", "name": "gemm", "start_ns": 130, "end_ns": 200, "tid": 1, "device": 0, "stream": 7,
         "correlation": 7},
        # a CUDA call that launched nothing, inside the second product
        {"kind": "cuda_api", "name": "cudaGetDevice", "start_ns": 310, "end_ns": 311, "tid": 1, "correlation": 8},
        # a launch on another thread, inside the third product's interval
        {"kind": "cuda_api", "name": "cudaLaunchKernel", "start_ns": 510, "end_ns": 520, "tid": 2, "correlation": 9},
        {"kind": "kernel", "name": "gemm", "start_ns": 530, "end_ns": 600, "tid": 2, "device": 0, "stream": 7,
         "correlation": 9},
    ])
    starts, ends = np.array([100, 300, 500]), np.array([150, 350, 550])
    flops = credited_flops(events, starts, ends, np.array([1, 1, 1]), np.array([1e9, 1e9, 1e9]), rate_cap=1.0)
    assert flops.tolist() == [1e9, 0.0, 0.0]  # the cap is a CPU trace's: a GPU trace credits by launches


def test_without_recorded_shapes_the_work_is_unknown_and_the_check_fails(tmp_path):
    honest = recorded(tmp_path / "honest.json")
    bare = recorded(tmp_path / "bare.json", shapes=False)
    for candidate, baseline, who in ((bare, honest, "your run"), (honest, bare, "the slow script's run")):
        outcome = step_work(work_evidence(candidate, baseline), declared("step_work"))
        assert outcome.status == FAILED and "record_shapes" in outcome.evidence[0] and who in outcome.evidence[0]
    missing = Evidence(chapter=get_chapter(CHAPTER), device="cpu", trace_tool="torch", candidate=Path("train.py"),
                       cfg={"warmup": 0}, traced=(None, None), traces={"candidate": honest})
    assert "no trace of the slow script" in step_work(missing, declared("step_work")).evidence[0]
    nsys = Evidence(chapter=get_chapter(CHAPTER), device="cuda", trace_tool="nsys", candidate=Path("train.py"),
                    cfg={"warmup": 0}, traced=(None, None), traces={"candidate": honest, "baseline": honest})
    outcome = step_work(nsys, declared("step_work"))
    assert outcome.status == FAILED and "--trace-tool torch" in outcome.evidence[0]


def test_work_by_step_judges_every_step_and_a_step_traced_in_one_run_only():
    import pandas as pd

    from checker.trace.analyses.work import work_by_step

    def work(rows):
        return pd.DataFrame(rows, columns=["step", "forward_flops", "backward_flops", "optimizer_steps"])

    baseline = work([(5, 100.0, 200.0, 1), (6, 400.0, 800.0, 1), (7, 100.0, 200.0, 1), (8, 0.0, 0.0, 1)])
    same = work_by_step(baseline, baseline, 0.05)
    assert not same["differs"].any() and (same["off"] == 0).all()
    # one step in four off by 6%, forward only: a median would pass it
    candidate = work([(5, 100.0, 200.0, 1), (6, 424.0, 800.0, 1), (7, 104.0, 200.0, 1), (8, 10.0, 0.0, 1),
                      (9, 100.0, 200.0, 1)])
    both = work_by_step(candidate, baseline, 0.05)
    assert both["differs"].tolist() == [False, True, False, True, True]
    assert both.loc[1, "forward_off"] == pytest.approx(0.06) and both.loc[3, "forward_off"] == float("inf")
    assert both.loc[4, "traced"] == "candidate"


def test_step_work_is_declared_for_both_devices_on_traces_that_record_shapes():
    chapter = get_chapter(CHAPTER)
    for device in ("cpu", "cuda"):
        assert chapter.config(device)["record_shapes"] is True
        # a quarter of a long batch moved out of its step is 25% of it: the tolerance stays well below
        assert 0 < float(declared("step_work").threshold_for(device)) < 0.25


def test_clock_reads_measure_each_step_from_the_scripts_own_reads():
    """The script's clock reads in the trace give each step's time: two or more reads in a step span it (a clock
    started and stopped around it), one read measures from the read before; the harness's own stamps (a frame of
    checker/) are not the script's, and a step without a read of the script's measured nothing."""
    import pandas as pd

    from checker.trace.analyses.clocks import clock_reads, clock_step_ms

    rows = []

    def frame(name, step, start, end):
        rows.append({"kind": "python", "name": name, "step": step, "pid": 1, "tid": 1, "start_ns": start, "end_ns": end})

    ms = 1_000_000
    for step, (begin, t0, t1) in {10: (0, 1, 9), 11: (10, 11, 21), 12: (22, 23, 26)}.items():
        frame("checker/candidate/session.py(378): steps", step, begin * ms, begin * ms + 100)
        frame("<built-in function perf_counter_ns>", step, begin * ms + 10, begin * ms + 20)  # the harness's stamp
        frame("train.py(40): measure", step, t0 * ms - 50, t1 * ms + 50)
        frame("<built-in function perf_counter>", step, t0 * ms, t0 * ms + 5)
        frame("<built-in function perf_counter>", step, t1 * ms, t1 * ms + 5)
    frame("train.py(40): measure", 13, 30 * ms, 35 * ms)  # a step the script did not time
    events = pd.DataFrame(rows)
    events["step"] = events["step"].astype("Int64")
    reads = clock_reads(events)
    assert len(reads) == 6  # the script's two per timed step, none of the harness's
    assert clock_step_ms(reads, [10, 11, 12, 13]) == {10: 8.0, 11: 10.0, 12: 3.0, 13: None}
    once = reads.groupby("step").head(1)  # one read per step: each step from the read before it
    assert clock_step_ms(once.reset_index(drop=True), [10, 11, 12]) == {10: None, 11: 10.0, 12: 12.0}
    # red team 25: a thread of the script's own read the clock at moments a model chose; only the stepping thread's
    # reads count
    rows.append({"kind": "python", "name": "<built-in function perf_counter>", "step": 13, "pid": 1, "tid": 2,
                 "start_ns": 31 * ms, "end_ns": 31 * ms + 5})
    events = pd.DataFrame(rows)
    events["step"] = events["step"].astype("Int64")
    assert len(clock_reads(events)) == 7
    assert len(clock_reads(events, threads=[(1, 1)])) == 6
    assert clock_reads(events, threads=[(1, 2)])["step"].tolist() == [13]


def test_a_class_of_chapter_00_is_graded_one_student_at_a_time_on_a_cpu():
    """step_cost holds a step's CPU time to the slow script's: a student graded beside another would be held to a
    baseline measured under another load, so `--workers 2` is refused, saying why."""
    from checker.base.chapters import get_chapter
    from checker.base.errors import WorkbookError
    from checker.grading.classroom import plan_slots

    with pytest.raises(WorkbookError, match="times its CPU checks \\(step_cost\\)"):
        plan_slots(get_chapter("00"), "cpu", None, 2, [])
    assert len(plan_slots(get_chapter("00"), "cpu", None, 1, [])) == 1
