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
from checker.checks import FAILED, PASSED
from checker.checks.data_parallel import rank_work
from checker.grader.ranks import weight_gap
from checker.trace import load
from checker.trace.analyses.collectives import allreduce_rounds, ops_per_step
from checker.trace.ranks import ranks_summary

DATA = Path(__file__).parent / "data" / "ddp09"
CHAPTER = get_chapter("09")


def _ranks(variant):
    return [load(DATA / f"{variant}-rank{rank}.json.gz") for rank in (0, 1)]


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


def test_report_prints_the_ranks_side_by_side():
    done = subprocess.run([sys.executable, "-m", "checker", "report", str(DATA / "lab-rank0.json.gz"), "--ranks",
                           str(DATA / "lab-rank1.json.gz")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Straggler: rank 0. Rank 1 waits for it" in done.stdout


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


def _judge(job):
    evidence = SimpleNamespace(device="cpu", cfg={"global_batch": 4}, pairs=((None, job),))
    return rank_work(evidence, CHAPTER.check("rank_work"))


def test_rank_work_passes_ranks_that_split_each_global_batch():
    assert _judge(_job([[[0, 2], [4, 6]], [[1, 3], [5, 7]]])).status == PASSED


def test_rank_work_fails_ranks_that_read_the_same_samples():
    outcome = _judge(_job([[[0, 1, 2, 3]], [[0, 1, 2, 3]]]))
    assert outcome.status == FAILED and outcome.measured["duplicated_share"] == 0.5
    assert "DistributedSampler" in outcome.evidence[0]


def test_rank_work_fails_a_sampler_that_leaves_samples_out_of_a_step():
    outcome = _judge(_job([[[0]], [[1]]]))  # two of the global batch of four read
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
