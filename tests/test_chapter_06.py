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
    # static_steps: the lab pads to each batch's maximum, so its judged steps record different amounts of input (all
    # 14 share one maximum in about 0.14% of runs: evidence/history/2026-12-06-cpu-session72-static-steps-06.json)
    assert host_syncs.measured["distinct_step_inputs"] >= 2 and "different amounts of input" in evidence


def test_solution_trains_to_the_slow_scripts_weights_without_a_sync(graded):
    report = graded(CHAPTER, "solution")
    same_work = next(c for c in report.checks if c.name == "same_work")
    host_syncs = next(c for c in report.checks if c.name == "host_syncs")
    assert same_work.status == "passed" and same_work.measured["weight_distance"] < 1e-3  # the same math
    assert host_syncs.status == "passed" and host_syncs.measured["host_syncs"] == 0
    assert host_syncs.measured["distinct_step_inputs"] == 1 and host_syncs.measured["steps"] >= 14  # static_steps


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


def test_each_window_batch_has_its_own_seed_and_is_drawn_only_when_the_harness_fetches(monkeypatch):
    """No generator runs on from one batch to the next (a copy of one predicted the next batches: red team 16's
    predicted_draws_06), and once keyed the source draws only inside session.steps()'s fetch, one batch per fetch,
    and the step is handed that batch (red team 42's prefetch_logstep_06 drew two in one fetch)."""
    import torch

    from checker.base import workloads
    from checker.base.workloads import KeyedDraws, check_fetched, harness_fetch

    monkeypatch.setattr(workloads, "_HARNESS_FETCHING", [False, None])

    def source():
        return KeyedDraws(lambda g: torch.randint(0, 1000, (4,), generator=g), per_pass=3, seed=5, device="cpu")

    first, second = source(), source()
    assert not any(isinstance(value, torch.Generator) for value in vars(first).values())
    assert [b.tolist() for b in first] == [b.tolist() for b in second]  # before the key: drawn freely, from the seed
    check_fetched(None, [])  # a source that is no KeyedDraws: nothing to hold a fetch to
    first.set_key(77), second.set_key(77)
    with pytest.raises(RuntimeError, match="drawn outside session.steps"):
        next(iter(first))

    def fetch(keyed):
        with harness_fetch():
            batch = next(iter(keyed))
        check_fetched(batch, keyed)
        return batch

    drawn = [fetch(first) for _ in range(2)]
    again = [fetch(second) for _ in range(2)]
    assert [b.tolist() for b in drawn] == [b.tolist() for b in again] and drawn[0].tolist() != drawn[1].tolist()
    other = source()
    other.set_key(78)
    assert fetch(other).tolist() != drawn[0].tolist()
    with harness_fetch(), pytest.raises(RuntimeError, match="two batches of the timed window were drawn in one"):
        batches = iter(first)
        next(batches), next(batches)
    with harness_fetch():  # one batch drawn, an earlier one handed to the step
        next(iter(first))
    with pytest.raises(RuntimeError, match="handed a batch other than the one its fetch drew"):
        check_fetched(drawn[0], first)
    with harness_fetch():  # no batch drawn at all
        pass
    with pytest.raises(RuntimeError, match="handed a batch other than the one its fetch drew"):
        check_fetched(drawn[0], first)
