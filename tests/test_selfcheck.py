"""Every chapter's verdicts are earned on a CPU, as CI sees them: the slow script and the unmodified lab fail,
the solution passes, and every skipped check says why."""

import pytest

from checker.base.chapters import all_chapters
from conftest import code_line_of

CHAPTERS = [c.id for c in all_chapters()]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("chapter_id", CHAPTERS)
def test_solution_passes_on_cpu(graded, chapter_id):
    report = graded(chapter_id, "solution")
    failed = {c.name: c.evidence for c in report.checks if c.status == "failed"}
    assert report.passed, f"{chapter_id} solution failed on CPU: {failed}"
    assert any(c.status == "passed" and c.name != "same_work" for c in report.checks), \
        f"{chapter_id}: on CPU only same_work ran; add a check that means something on a CPU"


@pytest.mark.parametrize("chapter_id", CHAPTERS)
def test_unmodified_lab_fails_on_cpu(graded, chapter_id):
    report = graded(chapter_id, "lab")
    assert not report.passed, f"{chapter_id}: the unmodified lab passes on CPU; it must fail a CPU-capable check"
    failed = [c for c in report.checks if c.status == "failed"]
    assert all(c.evidence for c in failed), "a failed check must say what it saw"
    assert all(c.hint for c in failed), "a failed check must carry the chapter's hint"
    assert report.checks[0].name == "same_work" and report.checks[0].status == "passed", \
        "the lab is the slow script: it must do the same work"


@pytest.mark.parametrize("chapter_id", CHAPTERS)
@pytest.mark.parametrize("variant", ["lab", "solution"])
def test_every_skip_states_its_reason(graded, chapter_id, variant):
    for check in graded(chapter_id, variant).checks:
        if check.status == "skipped":
            assert check.reason and len(check.reason) > 20, f"{chapter_id}/{check.name}: skipped without a reason"


def test_lab_01_sync_evidence_names_the_item_line(graded, pristine_lab):
    item_line = code_line_of((pristine_lab("01") / "train.py").read_text(), "loss.item()")
    host_syncs = next(c for c in graded("01_item_syncs", "lab").checks if c.name == "host_syncs")
    assert host_syncs.status == "failed"
    assert any(f"train.py:{item_line} `running_loss += loss.item()" in line for line in host_syncs.evidence), \
        host_syncs.evidence
    assert host_syncs.measured["host_syncs_per_step"] == 3  # .item(), `if not isfinite`, float(): three per step


def test_slow_script_fails_like_the_lab(graded):
    report = graded("01_item_syncs", "slow")
    assert not report.passed
