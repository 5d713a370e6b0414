"""Chapter 06 (hidden syncs) on a CPU, as CI sees it: the unmodified lab's evidence names each helper's line,
the solution computes the same loss without a sync, and a rewrite that changes the loss's math is caught."""

import pytest

from checker.base.chapters import get_chapter
from conftest import code_line_of

pytestmark = pytest.mark.slow

CHAPTER = "06_hidden_syncs"


def test_lab_evidence_names_the_line_of_each_hidden_sync(graded, pristine_lab):
    lab = pristine_lab(CHAPTER) / "train.py"  # the lab as shipped, whatever the learner made of theirs
    host_syncs = next(c for c in graded(CHAPTER, "lab").checks if c.name == "host_syncs")
    assert host_syncs.status == "failed" and host_syncs.hint
    evidence = "\n".join(host_syncs.evidence)
    for helper_line, op in [("n_objects.max().item()", "_local_scalar_dense"),          # pad_targets
                            ("torch.repeat_interleave(", "_local_scalar_dense"),        # pad_targets
                            ("if not valid.any():", "_local_scalar_dense"),             # mask_loss
                            ("target = masks.flatten(0, 1)[valid.flatten()]", "nonzero"),  # mask_loss
                            ("torch.unique(", "_unique2"),                              # class_loss
                            ("targets = classes.flatten()[valid.flatten()]", "nonzero"),  # class_loss
                            ("loss.backward()", "nonzero")]:                            # x[mask] in backward
        line = code_line_of(lab.read_text(), helper_line)
        assert f"aten::{op} from " in evidence and f"train.py:{line} `" in evidence, (helper_line, evidence)
    assert host_syncs.measured["host_syncs_per_step"] >= 10


def test_solution_trains_to_the_slow_scripts_weights_without_a_sync(graded):
    report = graded(CHAPTER, "solution")
    same_work = next(c for c in report.checks if c.name == "same_work")
    host_syncs = next(c for c in report.checks if c.name == "host_syncs")
    assert same_work.status == "passed" and same_work.measured["weight_distance"] < 1e-3  # the same math
    assert host_syncs.status == "passed" and host_syncs.measured["host_syncs"] == 0


def test_a_rewrite_that_changes_the_mean_fails_same_work(tmp_path):
    """Averaging the mask loss over every slot instead of the real objects' slots is sync-free but wrong."""
    from checker.grader.evaluate import evaluate

    solution = get_chapter(CHAPTER).solution_script.read_text()
    wrong = solution.replace("selected = weight.sum() * (per_pixel.shape[-2] * per_pixel.shape[-1])",
                             "selected = torch.tensor(float(per_pixel.numel()))")
    assert wrong != solution
    (tmp_path / "train.py").write_text(wrong)
    report = evaluate(get_chapter(CHAPTER), submission=tmp_path, device="cpu", only={"same_work"})
    same_work = report.checks[0]
    assert same_work.status == "failed" and any("work differs" in line for line in same_work.evidence), same_work
