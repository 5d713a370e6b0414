"""Chapter 09, a data-parallel job on two ranks: the per-rank analyses on committed CPU traces (gloo, two
processes: tests/data/ddp09, recorded by `workbook check 09 --device cpu --keep-traces` and trimmed of Python
frames), the rank_work check on made-up jobs, and the chapter graded on a CPU (the red team is in
tests/redteam/bank.toml: skip_share_09, dropping_sampler_09, clean_trace_09)."""

import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from checker.base.chapters import get_chapter
from checker.base.workloads import load_workload_module
from checker.checks import FAILED, PASSED
from checker.checks.data_parallel import comm_overlap, cpu_beyond_slow, rank_work, straggler
from checker.grader.ranks import weight_gap
from checker.trace import load
from checker.trace.analyses.collectives import (allreduce_rounds, bucket_launches, extra_work, ops_per_step,
                                                unseen_host_ms_per_step)
from checker.trace.ranks import ranks_summary

DATA = Path(__file__).parent / "data" / "ddp09"
CHAPTER = get_chapter("09")


def _ranks(variant):
    return [load(DATA / f"{variant}-rank{rank}.json.gz") for rank in (0, 1)]


def _traced(traces, device):
    """What a check reads of a traced job: every rank's trace, by the grader's names."""
    named = {"candidate" if rank == 0 else f"candidate.rank{rank}": trace for rank, trace in enumerate(traces)}
    return SimpleNamespace(device=device, candidate_run=SimpleNamespace(ranks=traces), traces=named,
                           trace=named.__getitem__)


def test_report_names_rank_0_as_the_straggler_of_the_lab_and_rank_1_waiting():
    summary = ranks_summary(_ranks("lab"))
    assert summary["straggler"] == 0 and summary["waiting_rank"] == 1
    assert summary["worst_wait_share"] > 0.6
    assert [row["allreduce_rounds"] for row in summary["ranks"]] == [2, 2]


def test_solution_all_reduces_once_per_step_and_its_ranks_ask_for_the_same_ops():
    traces = _ranks("solution")
    assert all(set(allreduce_rounds(t.events)["rounds"]) == {1} for t in traces)
    assert ops_per_step(traces[0].events) == ops_per_step(traces[1].events)
    lab = _ranks("lab")
    assert ops_per_step(lab[0].events) > ops_per_step(lab[1].events)  # rank 0's evaluation, counted


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_straggler_blames_the_lab_rank_that_did_more_and_passes_the_solution_rank_that_was_only_late(device):
    """Both committed jobs wait past the threshold (the solution's rank 1 on a CPU's shared cores too); only the
    lab's late rank ran more ops per step, so only the lab fails: a wait alone is not a straggler's."""
    lab = straggler(_traced(_ranks("lab"), device), CHAPTER.check("straggler"))
    assert lab.status == FAILED and lab.measured["straggler"] == 0 and "recorded ops per step" in " ".join(lab.evidence)
    solution = straggler(_traced(_ranks("solution"), device), CHAPTER.check("straggler"))
    assert solution.measured["worst_wait_share"] > CHAPTER.check("straggler").threshold_for(device)
    assert solution.status == PASSED and solution.measured["straggler"] is None
    assert "a late host, not a straggler" in solution.evidence[0]


def test_straggler_fails_an_evaluation_in_numpy_that_adds_no_op_by_the_host_time_no_op_covers():
    """clean_trace_09's traces on a CPU (numpy-eval: rank 0 evaluates in numpy on views of the weights, every step):
    both ranks run the same ops per step; rank 0's host time outside any op and outside its collectives is many
    times rank 1's, and more than half the wait."""
    traces = [load(DATA / f"numpy-eval-rank{rank}.json.gz") for rank in (0, 1)]
    assert ops_per_step(traces[0].events) == ops_per_step(traces[1].events)
    for device in ("cpu", "cuda"):
        outcome = straggler(_traced(traces, device), CHAPTER.check("straggler"))
        assert outcome.status == FAILED and outcome.measured["straggler"] == 0
        assert "host time in no recorded op" in outcome.evidence[0]


def _work(ops=800.0, kernel_ms=None, unseen_ms=2.0, melements=None, compiled_ms=None):
    return {"ops_per_step": ops, "compute_kernel_ms": kernel_ms, "unseen_host_ms": unseen_ms, "input_melements": melements,
            "compiled_kernel_ms": compiled_ms}


def test_extra_work_counts_the_time_in_compiled_kernels_on_a_cpu():
    """A compiled graph's call records one op and its C++ kernels none: red team 61's compiled_eval_09 evaluated the
    model on rank 0 alone, every step, in one compiled call (its products summed by hand), 8 ops more and no product
    the shapes show. The kernels' calls are in the Python tracer's events, with their time: blamed when they are
    half the wait and twice the waiting rank's; two ranks running the same compiled code are not."""
    wait_ms = 40.0
    assert "compiled kernels" in extra_work(_work(compiled_ms=45.0), _work(compiled_ms=0.0), wait_ms)[0]
    assert extra_work(_work(compiled_ms=12.0), _work(compiled_ms=10.0), wait_ms) == []  # the same compiled code
    assert extra_work(_work(compiled_ms=15.0), _work(compiled_ms=0.0), wait_ms) == []  # less than half the wait
    assert extra_work(_work(compiled_ms=45.0), _work(compiled_ms=0.0), wait_ms, counted_only=True) == []  # timed
    assert extra_work(_work(compiled_ms=45.0), _work(), wait_ms) == []  # a trace without Python events says nothing


def _cpu_job(*cpu_ms, steps=8, script=CHAPTER.slow_script):
    """A job's run as the grader records it: each rank's CPU over its window (own process, others) and its steps."""
    return SimpleNamespace(script=script, ranks=[
        SimpleNamespace(window_cpu_ns=(int(ms * steps * 1e6), 0), step_ms=(1.0,) * steps) for ms in cpu_ms])


def test_a_rank_busier_than_another_by_the_kernels_count_fails_on_a_cpu_whatever_its_trace_shows():
    """Red team 62's hookeval_09 ran rank 0's evaluation in the all-reduce's completion callback, on gloo's thread,
    which the profiler's Python tracer does not follow: no op, product or wait showed it. The kernel's count of each
    rank's CPU time does: a rank spending more per step than another by three tenths of the slow script's evaluation
    every step fails; the solution's one logging step in the window, about a tenth, does not. Session 77's runs:
    slow 61.1 and 9.4 ms per step, the solution 16.4 and 9.1, hookeval_09 1118.8 and 15.5."""
    def judged(slow, candidate, device="cpu"):
        return cpu_beyond_slow(SimpleNamespace(device=device, chapter=CHAPTER,
                                               traced=(_cpu_job(*slow), _cpu_job(*candidate))))
    assert judged((61.1, 9.4), (16.4, 9.1)) == ({"candidate": [16.4, 9.1], "slow": [61.1, 9.4]}, "")
    measured, found = judged((61.1, 9.4), (1118.8, 15.5))
    assert "rank 0 spends 1103.30 ms per step more than rank 1" in found
    assert "rank 1 spends" in judged((61.1, 9.4), (9.4, 40.0))[1]  # whichever rank is busier
    assert judged((61.1, 9.4), (1118.8, 15.5), device="cuda") is None  # a GPU's work is its kernels' time
    # the same hidden work on both ranks: no spread, every rank above the slow script's waiting rank and half its
    # evaluation (red team 63's compiled evaluation on both ranks, about 140 ms each)
    assert "rank 0 spends 140.00 ms per step, more than the slow script's least busy rank" in judged((61.1, 9.4), (140.0, 139.0))[1]
    assert judged((61.1, 9.4), (18.5, 15.0))[1] == ""  # the solution's busiest rank seen
    assert cpu_beyond_slow(SimpleNamespace(device="cpu", chapter=CHAPTER, traced=None)) is None
    unread = SimpleNamespace(ranks=[SimpleNamespace(window_cpu_ns=None, step_ms=())] * 2)
    assert cpu_beyond_slow(SimpleNamespace(device="cpu", chapter=CHAPTER, traced=(_cpu_job(61.1, 9.4), unread))) is None
    # a class graded against the reference solution: its busiest rank is the scale (session 77's class test: an
    # honest student 22.9 and 8.8 ms against the reference's 26.1 and 9.4)
    reference = _cpu_job(26.1, 9.4, script=CHAPTER.solution_script)
    beside = SimpleNamespace(device="cpu", chapter=CHAPTER, traced=(reference, _cpu_job(22.9, 8.8)))
    assert cpu_beyond_slow(beside)[1] == ""
    beside.traced = (reference, _cpu_job(140.0, 139.0))
    assert "the reference solution's busiest rank" in cpu_beyond_slow(beside)[1]


def test_each_ranks_median_step_cpu_leaves_out_logging_steps():
    """step_cpu_ms: each rank's median CPU per window step, from the grader's readings as each step began and as the
    window closed, logging steps aside (a solution's rank 0 evaluates there); None on a GPU or with no readings."""
    from checker.checks.data_parallel import step_cpu_ms

    def rank(*costs_ms, steps=10):  # the readings of a window of len(costs_ms) steps ending at ``steps``
        marks = [0]
        for ms in costs_ms:
            marks.append(marks[-1] + int(ms * 1e6))
        return SimpleNamespace(step_cpu_ns=marks, steps=steps)

    log_steps = {9}  # (step + 1) % 10 == 0
    job = SimpleNamespace(ranks=[rank(3, 3, 3, 3, 3, 3, 3, 3, 90), rank(12, 12, 12, 12, 12, 12, 12, 12, 3)])
    evidence = SimpleNamespace(device="cpu", traced=(None, job), is_log_step=lambda step: step in log_steps)
    assert step_cpu_ms(evidence) == [3.0, 12.0]  # step 9 (the last of steps 1..9) is a logging step
    # the lower quartile: a rank's quiet steps (steps 1..8 cost 2..9 ms: 2 + 7/4)
    quiet = SimpleNamespace(device="cpu", traced=(None, SimpleNamespace(ranks=[rank(2, 3, 4, 5, 6, 7, 8, 9, 90)] * 2)),
                            is_log_step=lambda step: step in log_steps)
    assert step_cpu_ms(quiet, quartile=1) == [3.75, 3.75] and step_cpu_ms(quiet) == [5.5, 5.5]
    assert step_cpu_ms(SimpleNamespace(device="cuda", traced=(None, job), is_log_step=lambda s: False)) is None
    job.ranks[1].step_cpu_ns = []
    assert step_cpu_ms(evidence) is None


def test_every_ranks_median_step_is_held_to_the_slow_scripts_least_busy_rank():
    """busy_steps: an evaluation every step, split between the ranks (red team 63's compiled_spliteval_09: medians
    24-27 ms against the slow script's least busy rank's 3.5-5.3), fails; the solution's (2.7-3.6 ms) passes; beside a
    reference solution its busiest rank is the scale. Session 78's readings."""
    from checker.checks.data_parallel import busy_steps

    beside_slow = SimpleNamespace(chapter=CHAPTER, traced=(SimpleNamespace(script=CHAPTER.slow_script), None))
    assert busy_steps(beside_slow, [35.64, 3.51], [3.64, 2.72]) == ""
    found = busy_steps(beside_slow, [35.64, 3.51], [25.57, 24.16])
    assert "rank 0's median step" in found and "least busy rank" in found
    beside_reference = SimpleNamespace(chapter=CHAPTER, traced=(SimpleNamespace(script=CHAPTER.solution_script), None))
    assert busy_steps(beside_reference, [3.5, 3.0], [4.1, 3.2]) == ""
    assert "the reference solution's busiest rank" in busy_steps(beside_reference, [3.5, 3.0], [25.0, 24.0])


def test_extra_work_counts_what_the_recorded_ops_were_given_beyond_its_margin():
    """Red team 27's rank 0 evaluated the held-out set through torch.cdist, a product no list names, with as many ops
    as rank 1: the input elements its recorded ops were given (the trace's shapes) tell the work apart, on a busy
    machine as on an idle one. Two ranks of an honest job give their ops the same elements."""
    wait_ms = 40.0
    assert extra_work(_work(melements=10.0), _work(melements=10.0), wait_ms) == []
    assert extra_work(_work(melements=10.9), _work(melements=10.0), wait_ms) == []  # within the margin
    assert "M input elements" in extra_work(_work(melements=117.7), _work(melements=12.3), wait_ms)[0]
    assert extra_work(_work(), _work(melements=10.0), wait_ms) == []  # a trace without shapes says nothing


def test_extra_work_needs_more_ops_kernel_time_or_unseen_host_time_beyond_its_margin():
    wait_ms = 40.0
    assert extra_work(_work(), _work(), wait_ms) == []
    assert extra_work(_work(ops=810), _work(), wait_ms) == []  # within the op margin: the counts' own jitter
    assert "recorded ops" in extra_work(_work(ops=900), _work(), wait_ms)[0]
    # the same kernels on both GPUs, one host slower: no blame; an evaluation's kernels on one rank: blame
    assert extra_work(_work(kernel_ms=21.0), _work(kernel_ms=20.0), wait_ms) == []
    assert "compute kernels" in extra_work(_work(kernel_ms=35.0), _work(kernel_ms=20.0), wait_ms)[0]
    # host time out of the profiler's sight: blamed when it is half the wait and twice the waiting rank's
    assert "no recorded op" in extra_work(_work(unseen_ms=30.0), _work(unseen_ms=5.0), wait_ms)[0]
    assert extra_work(_work(unseen_ms=15.0), _work(unseen_ms=5.0), wait_ms) == []  # less than half the wait
    assert extra_work(_work(unseen_ms=50.0), _work(unseen_ms=30.0), wait_ms) == []  # not twice the waiting rank's


def test_unseen_host_time_is_small_where_every_rank_runs_its_work_in_pytorch():
    """Python between ops only: a few per cent of the step, the time a thread takes to wake from a collective
    (several ms on these traces' busy CPU) not counted."""
    for trace in _ranks("solution") + _ranks("lab"):
        unseen = unseen_host_ms_per_step(trace)
        steps = trace.get_steps()["dur_ns"].median() / 1e6
        assert 0 < unseen < 0.1 * steps


def test_bucket_launches_tell_buckets_sent_during_backward_from_one_sent_after_it():
    """Real CPU traces: the solution's gradients fit one bucket (sent after backward's last node), the lab's one
    model-sized bucket likewise, per micro-batch; with buckets of 0.1 MB (small-buckets) two of three go out while
    backward still computes."""
    small = bucket_launches(load(DATA / "small-buckets-rank0.json.gz").events)
    assert set(small["allreduce_calls"]) == {3} and set(small["early_calls"]) == {2}
    for variant in ("solution", "lab"):
        for trace in _ranks(variant):
            frame = bucket_launches(trace.events)
            assert frame["allreduce_calls"].min() >= 1 and frame["early_calls"].max() == 0


def test_comm_overlap_on_a_gpu_threshold_passes_small_buckets_and_fails_one_bucket_after_backward():
    spec = CHAPTER.check("comm_overlap")
    small = load(DATA / "small-buckets-rank0.json.gz")
    passed = comm_overlap(_traced([small, small], "cuda"), spec)
    assert passed.status == PASSED and passed.measured["early_bucket_share"] == pytest.approx(2 / 3, abs=1e-3)
    failed = comm_overlap(_traced(_ranks("lab"), "cuda"), spec)
    assert failed.status == FAILED and "bucket_cap_mb" in failed.evidence[0]


def test_the_cpu_model_fits_ddps_first_bucket_as_comm_overlaps_cpu_skip_says():
    from torch.distributed import _DEFAULT_FIRST_BUCKET_BYTES

    from checker.base.workloads import load_workload_module

    cfg = CHAPTER.config("cpu")
    model = load_workload_module(CHAPTER.dir).make_model(cfg["in_features"], cfg["width"], cfg["layers"], cfg["classes"])
    assert sum(p.numel() * p.element_size() for p in model.parameters()) < _DEFAULT_FIRST_BUCKET_BYTES
    assert "first bucket" in CHAPTER.check("comm_overlap").skip_reason_for("cpu")


def test_report_prints_the_ranks_side_by_side():
    done = subprocess.run([sys.executable, "-m", "checker", "report", str(DATA / "lab-rank0.json.gz"), "--ranks",
                           str(DATA / "lab-rank1.json.gz")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Straggler: rank 0. Rank 1 waits for it" in done.stdout
    done = subprocess.run([sys.executable, "-m", "checker", "report", str(DATA / "solution-rank0.json.gz"), "--ranks",
                           str(DATA / "solution-rank1.json.gz")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "No straggler: rank 1 waits" in done.stdout and "a late host" in done.stdout


def _state(scale=1.0):
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(3, 3) * scale}, buffer)
    return buffer.getvalue()


def _job(per_rank_steps, gap=0.0):
    ranks = []
    for steps in per_rank_steps:
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in steps])
        ranks.append(SimpleNamespace(sample_ids=ids.tobytes(), sample_counts=[len(s) for s in steps]))
    return SimpleNamespace(ranks=ranks, rank_weight_gap=gap)


@pytest.fixture(autouse=True)
def _measured_rows_match_the_share(monkeypatch, request):
    """Unit tests of rank_work hold no traces: each rank's measured rows are its share unless a test says otherwise."""
    if "graded_cpu" in request.fixturenames:
        return
    from checker.checks import data_parallel

    monkeypatch.setattr(data_parallel, "trained_rows", lambda evidence: ([2.0, 2.0], []))


def _judge(job):
    evidence = SimpleNamespace(device="cpu", cfg={"global_batch": 4}, pairs=((None, job),))
    return rank_work(evidence, CHAPTER.check("rank_work"))


def _judge_rows(job, rows, monkeypatch):
    from checker.checks import data_parallel

    monkeypatch.setattr(data_parallel, "trained_rows", lambda evidence: (rows, []))
    return _judge(job)


def test_rank_work_fails_ranks_whose_trace_shows_twice_their_share_though_the_log_is_clean(monkeypatch):
    # the sample log says each rank read its half; the traces' backward matmuls say each trained the whole batch
    outcome = _judge_rows(_job([[[0, 2]], [[1, 3]]]), [4.0, 4.0], monkeypatch)
    assert outcome.status == FAILED and "rows per step" in outcome.evidence[-1]
    assert outcome.measured["trained_rows_per_step"] == [4.0, 4.0]


def test_rank_work_fails_one_rank_training_for_both(monkeypatch):
    outcome = _judge_rows(_job([[[0, 2]], [[1, 3]]]), [4.0, 0.0], monkeypatch)
    assert outcome.status == FAILED and "rank 1 0 rows" in outcome.evidence[-1].replace(",", "")


def test_rank_work_fails_a_rank_whose_work_was_not_measured(monkeypatch):
    outcome = _judge_rows(_job([[[0, 2]], [[1, 3]]]), [2.0, None], monkeypatch)
    assert outcome.status == FAILED and "could not be measured" in " ".join(outcome.evidence)


def test_rank_work_passes_ranks_that_split_each_global_batch():
    assert _judge(_job([[[0, 2], [4, 6]], [[1, 3], [5, 7]]])).status == PASSED


def test_rank_work_fails_ranks_that_read_the_same_samples(monkeypatch):
    outcome = _judge_rows(_job([[[0, 1, 2, 3]], [[0, 1, 2, 3]]]), [4.0, 4.0], monkeypatch)
    assert outcome.status == FAILED and outcome.measured["duplicated_share"] == 0.5
    assert "DistributedSampler" in " ".join(outcome.evidence)  # the sample log explains the measured failure


def test_rank_work_fails_a_sample_log_that_shows_reads_repeated():
    # each rank's trace shows rows of its own share (a count the rank can route around: a product the grader does not
    # count), but its own sample log shows every sample read twice: a log can be forged to look right, not wrong
    outcome = _judge(_job([[[0, 1, 2, 3]], [[0, 1, 2, 3]]]))
    assert outcome.status == FAILED and outcome.measured["duplicated_share"] == 0.5
    assert "read by 2.0 ranks" in " ".join(outcome.evidence)


def test_rank_work_fails_a_sampler_that_leaves_samples_out_of_a_step(monkeypatch):
    outcome = _judge_rows(_job([[[0]], [[1]]]), [1.0, 1.0], monkeypatch)  # two of the global batch of four read
    assert outcome.status == FAILED and "fewer than the global batch" in " ".join(outcome.evidence)


def test_rank_work_fails_ranks_whose_weights_differ():
    outcome = _judge(_job([[[0, 2]], [[1, 3]]], gap=0.01))
    assert outcome.status == FAILED and "different weights" in " ".join(outcome.evidence)


def test_weight_gap_is_zero_for_equal_states_and_relative_otherwise():
    assert weight_gap([_state(), _state()]) == 0.0
    assert weight_gap([_state(1.0), _state(1.5)]) == pytest.approx(0.5)
    assert weight_gap([_state(), None]) is None


@pytest.fixture(scope="module")
def graded_cpu():
    from checker.grader.evaluate import evaluate

    return {variant: evaluate(CHAPTER, variant=variant, device="cpu") for variant in ("lab", "solution")}


def test_lab_fails_on_a_cpu_on_each_mistake_a_cpu_shows(graded_cpu):
    report = graded_cpu["lab"]
    status = {c.name: c.status for c in report.checks}
    assert status["rank_work"] == FAILED and status["allreduce_rounds"] == FAILED and status["straggler"] == FAILED


def test_solution_passes_on_a_cpu_and_says_why_overlap_and_speed_are_skipped(graded_cpu):
    report = graded_cpu["solution"]
    assert report.passed, [c.to_json() for c in report.checks if c.status == FAILED]
    skipped = {c.name: c.reason for c in report.checks if c.status == "skipped"}
    assert set(skipped) == {"comm_overlap", "throughput"} and all(skipped.values())


def test_rank_timeline_draws_a_band_per_rank_with_the_wait_of_the_rank_that_waited(tmp_path):
    from checker.trace.timeline import draw_rank_timeline, rank_lanes

    traces = _ranks("lab")
    lanes = rank_lanes(traces)
    waited = [int((lane["wait"][1] - lane["wait"][0]).sum()) for lane in lanes]
    assert waited[1] > 10 * max(waited[0], 1)  # rank 1 waits for rank 0's evaluation; rank 0 hardly waits
    summary = ranks_summary(traces)
    drawn_steps = len(lanes[1]["steps"])
    assert waited[1] / drawn_steps == pytest.approx(summary["ranks"][1]["wait_ms"] * 1e6, rel=0.5)
    out = draw_rank_timeline(traces, tmp_path / "ranks.png")
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(Exception, match="two traces or more"):
        draw_rank_timeline(traces[:1], tmp_path / "one.png")


def test_a_class_slot_of_chapter_09_holds_both_ranks(monkeypatch):
    """Each student's job runs on two GPUs: one slot per pair, a leftover GPU idle; one GPU is refused. On the
    CPU, the workers' ranks may not outnumber the CPUs."""
    from checker.base.errors import WorkbookError
    from checker.grading.classroom import CPUS_ENV, plan_slots

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    slots = plan_slots(CHAPTER, "cuda", None, None, ["H100"] * 5)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0,1", "2,3"]
    assert [s.env[CPUS_ENV] for s in slots] == [",".join(map(str, range(8))), ",".join(map(str, range(8, 16)))]
    assert slots[0].label == "gpus 0,1 (H100, H100)"
    with pytest.raises(WorkbookError, match="on 2 GPUs, and 1 is given"):
        plan_slots(CHAPTER, "cuda", "1", None, ["H100", "H100"])
    assert len(plan_slots(CHAPTER, "cpu", None, 8, [])) == 8
    with pytest.raises(WorkbookError, match="runs 2 ranks.*use --workers 8"):
        plan_slots(CHAPTER, "cpu", None, 9, [])


@pytest.mark.slow
def test_grade_a_class_of_chapter_09_on_a_cpu(tmp_path):
    """`workbook grade 09` on the CPU: each student's job is two gloo processes; the solution passes, the lab fails
    on each mistake a CPU shows, and comm_overlap and throughput are skipped with their reasons."""
    import csv

    from gradinglib import run_grade

    root = Path(__file__).resolve().parent.parent
    for name, script in (("ann", root / "solutions" / "09_data_parallel" / "train.py"),
                         ("bob", root / "labs" / "09_data_parallel" / "train.py")):
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / "train.py").write_bytes(script.read_bytes())
    proc = run_grade("09", tmp_path / "class", tmp_path / "grades", "--device", "cpu", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every student got a verdict
    feedback = tmp_path / "grades" / "feedback" / "ann.md"
    assert "2 submissions: 1 passed, 1 failed" in proc.stdout, \
        proc.stdout[-600:] + (feedback.read_text()[-3000:] if feedback.is_file() else "")  # what failed, and why
    rows = {row["student"]: row for row in csv.DictReader((tmp_path / "grades" / "gradebook.csv").open())}
    assert rows["ann"]["verdict"] == "passed"
    assert rows["bob"]["verdict"] == "failed"
    for check in ("rank_work", "straggler", "allreduce_rounds"):
        assert rows["bob"][check].startswith("failed"), rows["bob"]
    assert rows["ann"]["comm_overlap"].startswith("skipped") and rows["ann"]["throughput"].startswith("skipped")


def test_matmul_flops_reads_recorded_shapes():
    from checker.trace.kineto import matmul_flops

    assert matmul_flops("aten::addmm", [[8], [4, 3], [3, 8], [], []]) == 2 * 4 * 3 * 8
    assert matmul_flops("aten::mm", [[4, 3], [3, 8]]) == 2 * 4 * 3 * 8
    assert matmul_flops("aten::bmm", [[2, 4, 3], [2, 3, 8]]) == 2 * 2 * 4 * 3 * 8
    assert matmul_flops("aten::mm", [[4], []]) is None
    # the same products written as matrix-vector and rank-one ones count too (a sample at a time through torch.mv)
    assert matmul_flops("aten::mv", [[4, 3], [3]]) == 2 * 4 * 3
    assert matmul_flops("aten::addmv_", [[4], [4, 3], [3], [], []]) == 2 * 4 * 3
    assert matmul_flops("aten::outer", [[4], [3]]) == matmul_flops("aten::ger", [[4], [3]]) == 2 * 4 * 3
    assert matmul_flops("aten::addr", [[4, 3], [4], [3], [], []]) == 2 * 4 * 3
    assert matmul_flops("aten::baddbmm", [[2, 4, 8], [2, 4, 3], [2, 3, 8], [], []]) == 2 * 2 * 4 * 3 * 8
    assert matmul_flops("aten::dot", [[5], [5]]) == 10
    # a convolution is a product too (a 1x1 conv1d is a Linear layer): 2 * batch * out * in * kernel * positions
    assert matmul_flops("aten::conv1d", [[4, 8, 16], [6, 8, 1], [], [], [], [], []]) == 2 * 4 * 6 * 8 * 16
    assert matmul_flops("aten::convolution_backward", [[4, 6, 16], [4, 8, 16], [6, 8, 1], [], []]) == 2 * 2 * 4 * 6 * 8 * 16
    # its output's positions follow the stride, padding and dilation the trace records ("Concrete Inputs"): a strided
    # convolution computes a stride's share of its input's positions (red team 17's strided_conv_00)
    conv = [[2, 4, 32], [8, 4, 3], [], [], [], [], []]
    assert matmul_flops("aten::conv1d", conv, ["", "", "", "[2]", "[1]", "[1]", "1"]) == 2 * 2 * 8 * 4 * 3 * 16
    assert matmul_flops("aten::conv1d", conv, ["", "", "", "[1]", "[0]", "[2]", "1"]) == 2 * 2 * 8 * 4 * 3 * 28
    square = [[2, 4, 9, 9], [8, 4, 3, 3]] + [[]] * 7
    strided = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    assert matmul_flops("aten::convolution", square, strided) == 2 * 2 * 8 * 4 * 9 * 5 * 5
    assert matmul_flops("aten::convolution", square, strided[:6] + ["True"] + strided[7:]) == 2 * 2 * 8 * 4 * 9 * 81
    # a product scaled by alpha = 0 computes nothing; a product with its activation fused is one
    assert matmul_flops("aten::addmm", [[8], [4, 3], [3, 8], [], []], ["", "", "", "1", "0"]) == 0
    assert matmul_flops("aten::_addmm_activation", [[8], [4, 3], [3, 8], [], [], []], ["", "", "", "1", "1", "False"]) \
        == 2 * 4 * 3 * 8


def test_a_product_inside_another_counts_once(tmp_path):
    """torch.mv runs aten::addmv_ inside aten::mv, its backward aten::outer inside aten::ger: each product's FLOPs
    count once, in a real trace."""
    import torch

    from checker.trace import load
    from checker.trace.analyses.collectives import _inside_other

    W, x = torch.randn(64, 32, requires_grad=True), torch.randn(32)
    with torch.profiler.profile(record_shapes=True) as prof:
        torch.mv(W, x).sum().backward()
    path = tmp_path / "mv.json"
    prof.export_chrome_trace(str(path))
    found = load(path).meta["matmuls"]
    starts, ends = np.asarray(found["start_ns"]), np.asarray(found["start_ns"]) + np.asarray(found["dur_ns"])
    kept = ~_inside_other(starts, ends, np.asarray(found["tid"]))
    assert len(found["flops"]) == 4  # mv, addmv_ inside it; ger, outer inside it
    assert sorted(np.asarray(found["flops"])[kept]) == [2 * 64 * 32, 2 * 64 * 32]


def test_a_convolutions_backward_counts_the_gradients_it_was_asked_for():
    """convolution_backward's output_mask (argument 10) says which gradients it computes: one asked for nothing
    computes nothing (red team 65's halfdecoy_05 padded its steps with such calls, each credited two passes); a first
    layer's, with no input gradient, one pass. Where the mask was not recorded, both gradients count."""
    from checker.trace.kineto import matmul_flops

    dims = [[2, 4, 6, 6], [2, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], [], [], [], []]
    args = ["", "", "", "[0]", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]
    one = 2 * 2 * 4 * 3 * 3 * 3 * 6 * 6  # a gradient: the forward's FLOPs, at grad_output's positions
    assert matmul_flops("aten::convolution_backward", dims, args + ["[True, True, False]"]) == 2 * one
    assert matmul_flops("aten::convolution_backward", dims, args + ["[False, True, False]"]) == one
    assert matmul_flops("aten::convolution_backward", dims, args + ["[False, False, True]"]) == 0
    assert matmul_flops("aten::convolution_backward", dims, args + ["[False, False, False]"]) == 0
    assert matmul_flops("aten::convolution_backward", dims, None) == 2 * one
    # an int8 weight's product, called by name: input (m, k), weight (n, k), scales (n)
    assert matmul_flops("aten::_weight_int8pack_mm", [[16, 32], [8, 32], [8]]) == 2 * 16 * 32 * 8


def test_an_in_place_product_counts_as_its_product(tmp_path):
    """Tensor.addmm_ and baddbmm_ compute what addmm and baddbmm do, into their first argument (red team 64's
    inplace_eval_09 evaluated every step through addmm_, uncounted): in a real trace each counts, with its FLOPs."""
    import torch

    from checker.trace import load
    from checker.trace.kineto import product_name

    assert product_name("aten::addmm_") == "aten::addmm" and product_name("aten::baddbmm_") == "aten::baddbmm"
    assert product_name("aten::add_") is None and product_name("aten::mm") == "aten::mm"
    out, x, w = torch.zeros(16, 8), torch.randn(16, 4), torch.randn(4, 8)
    batched = torch.zeros(2, 16, 8)
    with torch.profiler.profile(record_shapes=True) as prof:
        out.addmm_(x, w, beta=0)
        batched.baddbmm_(x.expand(2, 16, 4), w.expand(2, 4, 8))
    path = tmp_path / "inplace.json"
    prof.export_chrome_trace(str(path))
    assert sorted(load(path).meta["matmuls"]["flops"]) == [2 * 16 * 4 * 8, 2 * 2 * 16 * 4 * 8]


def _op(name, start, end, tid=1):
    return {"kind": "cpu_op", "name": name, "start_ns": start, "end_ns": end, "tid": tid, "step": 0}


def test_allreduce_bursts_split_by_backward_passes_without_ddp_ranges():
    import pandas as pd

    from checker.trace.analyses.collectives import allreduce_bursts

    node = "autograd::engine::evaluate_function: AddmmBackward0"
    per_micro_batch = [_op("aten::addmm", 0, 1), _op(node, 2, 4), _op("aten::mm", 3, 4), _op("c10d::allreduce_", 5, 6),
                       _op("aten::addmm", 10, 11), _op(node, 12, 14), _op("aten::mm", 13, 14),
                       _op("c10d::allreduce_", 15, 16)]
    assert allreduce_bursts(pd.DataFrame(per_micro_batch)) == 2
    once = [e for e in per_micro_batch if not (e["name"] == "c10d::allreduce_" and e["start_ns"] == 5)]
    assert allreduce_bursts(pd.DataFrame(once)) == 1


def test_extra_work_counts_matmul_flops_when_op_counts_match():
    from checker.trace.analyses.collectives import extra_work

    late = {"ops_per_step": 100, "matmul_mflops": 900.0, "compute_kernel_ms": None, "unseen_host_ms": None}
    waiting = {"ops_per_step": 100, "matmul_mflops": 30.0, "compute_kernel_ms": None, "unseen_host_ms": None}
    assert any("matrix-multiply" in line for line in extra_work(late, waiting, 10.0))
    assert not extra_work(waiting | {"matmul_mflops": 31.0}, waiting, 10.0)


def test_the_speed_of_a_job_on_a_gpu_is_reported_with_its_scaling_against_one_rank():
    """Where throughput is graded (a GPU), the plan adds one run of the candidate as a single rank; a CPU, which
    grades no speed here, and a one-rank chapter add none."""
    from checker.grader.plan import make_plan

    assert make_plan(CHAPTER, "cuda").one_rank
    assert not make_plan(CHAPTER, "cpu").one_rank
    assert not make_plan(get_chapter("01"), "cuda").one_rank


def test_the_one_rank_run_keeps_the_per_rank_batch_and_its_failure_is_a_note_not_a_verdict():
    from checker.grader import pairs
    from checker.grader.plan import make_plan
    from checker.grader.runs import ScriptError

    calls, notes = [], []

    def run(script, what, secret, **kwargs):
        calls.append((script, kwargs))
        if len(calls) > 1:
            raise ScriptError("rank 0 ended with status 1")
        return SimpleNamespace(samples_per_s=100.0)

    runner = SimpleNamespace(cfg=CHAPTER.config("cuda"), candidate=Path("train.py"), run=run, notes=notes,
                             chapter=CHAPTER)
    maker = pairs._Maker(runner, make_plan(CHAPTER, "cuda"), "torch", CHAPTER.slow_script, None, {}, {})
    maker.one_rank_run()
    share = CHAPTER.config("cuda")["global_batch"] // CHAPTER.config("cuda")["world_size"]
    assert calls[0][0] == Path("train.py") and calls[0][1] == {"world": 1, "extra_args": ["--set", f"global_batch={share}"]}
    assert maker.made.one_rank.samples_per_s == 100.0
    maker.made.one_rank = None
    maker.one_rank_run()
    assert maker.made.one_rank is None and "scaling efficiency not measured" in notes[0]


def test_scaling_efficiency_is_the_jobs_speed_over_world_times_one_ranks():
    from checker.checks.throughput import _scaling

    evidence = SimpleNamespace(one_rank=SimpleNamespace(samples_per_s=1000.0), cfg={"world_size": 2})
    measured = {"candidate_samples_per_s": 1500.0}
    lines = _scaling(evidence, measured)
    assert measured["scaling_efficiency"] == 0.75 and measured["one_rank_samples_per_s"] == 1000.0
    assert "75% of 2x (reported, not graded)" in lines[0]
    assert _scaling(SimpleNamespace(one_rank=None, cfg={"world_size": 2}), {}) == []


@pytest.mark.slow
def test_a_data_parallel_script_runs_as_one_rank_with_plain_python():
    """No torchrun: the harness holds a process group of one, so DDP and DistributedSampler work as on two ranks
    (what a learner tries first, and the run scaling is measured against)."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "solutions" / "09_data_parallel" / "train.py"), "--device", "cpu",
                           "--set", "global_batch=32"], capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "samples/s" in done.stdout


def test_a_weighted_bag_of_embedding_rows_counts_as_a_product():
    from checker.trace.kineto import matmul_flops

    # F.embedding_bag(indices (16, 64) flattened to 1024, weight (64, 32), per_sample_weights): 2 * 1024 * 32
    assert matmul_flops("aten::embedding_bag", [[64, 32], [1024], [16], [], [], [], [1024], [], []]) == 2 * 1024 * 32
    assert matmul_flops("aten::_embedding_bag_backward", [[16, 32], [1024], [16], [0], [16], [16]]) == 2 * 1024 * 32


# --- allreduce_rounds by volume: the elements a step's collectives carried, from the sizes the trace recorded ---

def _kineto(tmp_path, events, name="t.json"):
    """A small Kineto trace of one step (ProfilerStep#1, 0..1000 us on thread 1) holding ``events``:
    (name, category, start us, dur us, tid, Input Dims or None)."""
    import json

    trace = [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000,
              "args": {}}]
    for event_name, cat, ts, dur, tid, dims in events:
        args = {} if dims is None else {"Input Dims": dims}
        trace.append({"ph": "X", "cat": cat, "name": event_name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                      "args": args})
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": trace}))
    return load(path)


def _volume_evidence(traces):
    evidence = _traced(traces, "cpu")
    evidence.cfg = CHAPTER.config("cpu")
    return evidence


def test_a_recorded_arguments_elements_are_its_tensors_summed():
    from checker.trace.kineto import _elements

    assert _elements([[150280]]) == 150280  # an all-reduce's tensor list of one bucket
    assert _elements([[3], [4, 2]]) == 11  # allreduce_coalesced_'s list
    assert _elements([4, 3]) == 12 and _elements([]) == 0  # a tensor; a scalar argument's empty sizes
    assert _elements([[]]) == 1  # a 0-d tensor in a list


def test_the_model_gradient_elements_are_the_workloads_parameters():
    from checker.trace.analyses.collectives import model_gradient_elements

    workload = load_workload_module(CHAPTER.dir)
    for device in ("cpu", "cuda"):
        cfg = CHAPTER.config(device)
        sizes = [int(cfg[k]) for k in ("in_features", "width", "layers", "classes")]
        model = workload.make_model(*sizes)
        assert model_gradient_elements(*sizes) == sum(p.numel() for p in model.parameters())


def test_collective_volume_sums_each_steps_collectives_and_the_gradients_one_backward_stores(tmp_path):
    from checker.trace.analyses.collectives import collective_volume

    node = "autograd::engine::evaluate_function: AddmmBackward0"
    grad = "torch::autograd::AccumulateGrad"
    events = [("aten::addmm", "cpu_op", 10, 5, 1, [[8], [4, 3], [3, 8], [], []]), (node, "cpu_op", 20, 10, 1, None),
              (grad, "cpu_op", 25, 2, 1, [[24]]), (grad, "cpu_op", 27, 2, 1, [[8]]),
              ("aten::addmm", "cpu_op", 40, 5, 1, [[8], [4, 3], [3, 8], [], []]), (node, "cpu_op", 50, 10, 1, None),
              (grad, "cpu_op", 55, 2, 1, [[24]]), (grad, "cpu_op", 57, 2, 1, [[8]]),
              # after the last backward: both micro-batches' gradients all-reduced, one through the functional op
              ("c10d::allreduce_", "cpu_op", 70, 5, 1, [[[32]], [], [], [], [], []]),
              ("_c10d_functional::all_reduce", "cpu_op", 80, 10, 1, [[32], [], []]),
              ("c10d::allreduce_", "cpu_op", 81, 5, 1, [[[32]], [], [], [], [], []]),  # inside it: counted once
              ("c10d::barrier", "cpu_op", 95, 1, 1, [[1], [], [], [], []]),  # carries no data
              ("c10d::broadcast_", "cpu_op", 100, 1, 1, [[[5]], [], [], [], [], []]),
              ("gloo:all_reduce", "user_annotation", 71, 3, 2, [[32]]),
              ("gloo:all_reduce", "user_annotation", 82, 3, 2, [[32]])]
    row = collective_volume(_kineto(tmp_path, events)).iloc[0]
    assert (row["allreduce_calls"], row["allreduce_elements"]) == (2, 64)
    assert (row["other_calls"], row["other_elements"]) == (1, 5)
    assert row["run_elements"] == 64 and row["elements"] == 69 and row["unsized_calls"] == 0
    assert row["gradient_elements"] == 32  # 64 elements stored over two backward passes


def test_collective_volume_sees_a_collective_gloo_ran_past_the_c10d_op(tmp_path):
    from checker.trace.analyses.collectives import collective_volume

    # a backend's allreduce called directly: gloo's run is in the trace, no c10d op is
    events = [("c10d::allreduce_", "cpu_op", 10, 5, 1, [[[32]], [], [], [], [], []]),
              ("gloo:all_reduce", "user_annotation", 11, 3, 2, [[32]]),
              ("gloo:all_reduce", "user_annotation", 30, 3, 2, [[32]])]
    row = collective_volume(_kineto(tmp_path, events)).iloc[0]
    assert row["allreduce_elements"] == 32 and row["run_elements"] == 64 and row["elements"] == 64


def test_collective_volume_counts_a_collective_recorded_without_sizes(tmp_path):
    from checker.trace.analyses.collectives import collective_volume

    row = collective_volume(_kineto(tmp_path, [("c10d::allreduce_", "cpu_op", 10, 5, 1, None)])).iloc[0]
    assert row["allreduce_calls"] == 1 and row["unsized_calls"] == 1 and row["elements"] == 0


def test_allreduce_rounds_fails_gradients_kept_and_all_reduced_after_the_last_backward():
    """The red team's deferred_allreduce_09 on a CPU (tests/data/ddp09/deferred-shapes-rank0): every micro-batch's
    backward in no_sync(), each one's gradients all-reduced after the last backward. Its calls make one burst (1
    round by grouping); it all-reduced the whole gradient twice a step (2 by volume)."""
    from checker.checks.data_parallel import allreduce_rounds as check

    spec = CHAPTER.check("allreduce_rounds")
    deferred = check(_volume_evidence([load(DATA / "deferred-shapes-rank0.json.gz")]), spec)
    assert deferred.status == FAILED, deferred.evidence
    assert deferred.measured["rounds_by_grouping"] == 1 and deferred.measured["rounds_by_volume"] == 2
    assert deferred.measured["rounds_per_step"] == 2 and "more than once" in deferred.evidence[0]
    assert deferred.measured["elements_per_step"] == 2 * deferred.measured["gradient_elements"]
    solution = check(_volume_evidence([load(DATA / "solution-shapes-rank0.json.gz")]), spec)
    assert solution.status == PASSED, solution.evidence
    assert solution.measured["rounds_by_volume"] == 1 and solution.measured["rounds_per_step"] == 1


def test_allreduce_rounds_fails_a_trace_whose_collectives_have_no_sizes():
    from checker.checks.data_parallel import allreduce_rounds as check

    # the committed traces of tests/data/ddp09 without "-shapes" were recorded without record_shapes
    outcome = check(_volume_evidence(_ranks("solution")), CHAPTER.check("allreduce_rounds"))
    assert outcome.status == FAILED and outcome.measured["ranks_without_sizes"] == [0, 1]
    assert "recorded no size" in outcome.evidence[-1]


def test_allreduce_rounds_judges_the_busiest_step_by_volume(tmp_path):
    """One step in several all-reducing the gradient twice is seen: volume is judged in the busiest step."""
    import pandas as pd

    from checker.checks import data_parallel

    volume = pd.DataFrame({"step": [1, 2, 3], "allreduce_calls": [1, 1, 2], "unsized_calls": [0, 0, 0],
                           "elements": [150280, 150280, 300560], "allreduce_elements": [150280, 150280, 300560],
                           "other_elements": [0, 0, 0]})
    rounds = pd.DataFrame({"step": [1, 2, 3], "allreduce_calls": [1, 1, 2], "forwards": [2, 2, 2], "rounds": [1, 1, 1]})
    evidence = _volume_evidence([SimpleNamespace(events=None)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data_parallel, "_rounds", lambda events: rounds)
        patch.setattr(data_parallel, "collective_volume", lambda trace: volume)
        outcome = data_parallel.allreduce_rounds(evidence, CHAPTER.check("allreduce_rounds"))
    assert outcome.status == FAILED and outcome.measured["rounds_by_volume"] == 2


def test_report_shows_the_rounds_a_rank_communicated():
    from checker.trace.ranks import render_ranks

    summary = ranks_summary([load(DATA / "deferred-shapes-rank0.json.gz")])
    row = summary["ranks"][0]
    assert row["rounds_by_grouping"] == 1 and row["rounds_by_volume"] == 2 and row["allreduce_rounds"] == 2
    assert "2x the 150,280 gradient elements one backward pass stores" in render_ranks(summary)
    assert ranks_summary(_ranks("solution"))["ranks"][0]["rounds_by_volume"] is None  # no sizes recorded


def test_an_nccl_trace_records_the_sizes_of_its_all_reduces_on_the_host():
    """tests/data/ddp09/nccl-one-rank-probe: torch.profiler with record_shapes on one GPU (NCCL, a process group of
    one): a dist.all_reduce of 10 elements, a backend's allreduce of 11 called past the c10d op, and a DDP backward
    of two buckets (a Linear(1024, 4096) and a Linear(4096, 2048): 12,589,056 gradient elements)."""
    meta = load(DATA / "nccl-one-rank-probe.json.gz").meta["sized"]
    calls = sorted(e for n, e in zip(meta["name"], meta["elements"]) if n == "c10d::allreduce_")
    runs = sorted(e for n, e in zip(meta["name"], meta["elements"]) if n == "nccl:all_reduce")
    assert calls == [10, 4198400, 8390656] and runs == [10, 11, 4198400, 8390656]
    assert 4198400 + 8390656 == 1024 * 4096 + 4096 + 4096 * 2048 + 2048


def test_rank_work_on_a_cpu_fails_ranks_that_spend_steps_outside_recorded_ops(monkeypatch):
    """Work done in numpy on every rank escapes the matrix-product count but not the step's time: on a CPU each
    rank's host time in no recorded op is held to twice the slow script's most plus 1 ms; on a GPU, or with no trace
    of the slow script asked for, the rule does not apply."""
    from checker.checks import data_parallel

    unseen = {"candidate": 9.2, "candidate.rank1": 1.0, "baseline": 2.5, "baseline.rank1": 2.0}
    monkeypatch.setattr(data_parallel, "rank_traces", lambda evidence, role="candidate": [role, f"{role}.rank1"])
    monkeypatch.setattr(data_parallel, "unseen_host_ms_per_step", lambda trace: unseen[trace])
    evidence = SimpleNamespace(device="cpu", traces={"baseline": object()})
    measured, lines = data_parallel.unseen_beyond_slow(evidence)
    assert measured["unseen_allowed_ms"] == 6.0 and len(lines) == 1 and "rank 0 9.2 ms" in lines[0]
    unseen["candidate"] = 5.9
    assert data_parallel.unseen_beyond_slow(evidence)[1] == []
    unseen["candidate"] = 9.2
    assert data_parallel.unseen_beyond_slow(SimpleNamespace(device="cuda", traces=evidence.traces)) == ({}, [])
    assert data_parallel.unseen_beyond_slow(SimpleNamespace(device="cpu", traces={})) == ({}, [])


def test_pairwise_distances_are_products():
    """Red teams 27 and 28 evaluated a model through torch.cdist (x.w = (|x|^2 + |w|^2 - d^2) / 2), which recorded
    no other product: its kernels count as one from the recorded shapes, 2 x rows x rows x features (batched too),
    and its backward as much again."""
    from checker.trace.kineto import matmul_flops

    assert matmul_flops("aten::_cdist_forward", [[4, 8], [6, 8], [], []]) == 2 * 4 * 6 * 8
    assert matmul_flops("aten::_cdist_forward", [[2, 4, 8], [2, 6, 8], [], []]) == 2 * 2 * 4 * 6 * 8
    assert matmul_flops("aten::_cdist_backward", [[4, 6], [4, 8], [6, 8], [], [4, 6]]) == 2 * 4 * 6 * 8
    assert matmul_flops("aten::_cdist_forward", [[4, 8], [6]]) is None


def test_allreduce_rounds_fails_a_step_that_all_reduced_less_than_the_gradient(tmp_path):
    """A step whose trace shows less than the whole gradient all-reduced (red team 52's zero_rounds_09 hid both of
    its micro-batches' all-reduces, and zero rounds sat under the one allowed): every step all-reduces it once."""
    import pandas as pd

    from checker.checks import data_parallel

    def outcome(elements):
        volume = pd.DataFrame({"step": [1, 2, 3], "allreduce_calls": [1 if e else 0 for e in elements],
                               "unsized_calls": [0, 0, 0], "elements": elements, "allreduce_elements": elements,
                               "other_elements": [0, 0, 0]})
        rounds = pd.DataFrame({"step": [1, 2, 3], "allreduce_calls": [1 if e else 0 for e in elements],
                               "forwards": [2, 2, 2], "rounds": [1 if e else 0 for e in elements]})
        evidence = _volume_evidence([SimpleNamespace(events=None)])
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(data_parallel, "_rounds", lambda events: rounds)
            patch.setattr(data_parallel, "collective_volume", lambda trace: volume)
            return data_parallel.allreduce_rounds(evidence, CHAPTER.check("allreduce_rounds"))

    assert outcome([150280, 150280, 150280]).status == PASSED
    for elements in ([0, 0, 0], [150280, 0, 150280]):
        failed = outcome(elements)
        assert failed.status == FAILED and failed.measured["least_rounds_by_volume"] == 0, failed.evidence
        assert "all-reduces the whole gradient" in failed.evidence[-1]
