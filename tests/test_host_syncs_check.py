"""The host_syncs check on real traces: counts per step, logging steps left out, and where each sync came from."""

from pathlib import Path

import pytest

from checker.base.chapters import CheckSpec
from checker.checks.evidence import Evidence
from checker.checks.host_syncs import host_syncs
from checker.trace import load

TRACES = Path(__file__).parent / "data" / "traces"
SPEC = CheckSpec(name="host_syncs", doc="no syncs", threshold={"cuda": 0, "cpu": 0}, skip={}, options={})


def evaluation(trace_path, device="cuda", log_every=0):
    """The evidence of a traced run whose trace is ``trace_path``, as the grader hands it to the checks."""
    return Evidence(chapter=None, device=device, trace_tool="torch", candidate=Path("scripts/trace_fixture_programs.py"),
                    cfg={"log_every": log_every}, traced=(None, None), traces={"candidate": load(trace_path)})


@pytest.mark.parametrize("tool_file", ["kineto.json.gz", "nsys.sqlite.gz"])
def test_gpu_trace_three_syncs_per_step(tool_file):
    outcome = host_syncs(evaluation(TRACES / "pageable_item" / tool_file), SPEC)
    assert outcome.status == "failed"
    assert outcome.measured["host_syncs_per_step"] == 3 and outcome.measured["steps"] == 7


def test_gpu_kineto_from_torch_2_11_says_it_has_no_call_lines():
    outcome = host_syncs(evaluation(TRACES / "pageable_item" / "kineto.json.gz"), SPEC)
    assert all("records no call lines" in line for line in outcome.evidence), outcome.evidence


def test_logging_steps_are_left_out():
    outcome = host_syncs(evaluation(TRACES / "pageable_item" / "kineto.json.gz", log_every=2), SPEC)
    assert outcome.measured["logging_steps_excluded"] == [1, 3, 5]
    assert outcome.measured["steps"] == 4 and outcome.measured["host_syncs"] == 12


def test_clean_gpu_trace_passes():
    outcome = host_syncs(evaluation(TRACES / "pinned_clean" / "kineto.json.gz"), SPEC)
    assert outcome.status == "passed" and outcome.measured["host_syncs"] == 0 and not outcome.evidence


def test_cpu_trace_names_the_line_and_its_code():
    outcome = host_syncs(evaluation(TRACES / "cpu" / "pageable_item.json.gz", device="cpu"), SPEC)
    assert outcome.status == "failed"
    assert any("`state[\"loss_sum\"] += loss.item()" in line for line in outcome.evidence), outcome.evidence
