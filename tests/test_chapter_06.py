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
    # every window step (probe_updates = "all" on a CPU) made one SGD step on its whole batch with the slow script's
    # loss (the update check), the window's first step among them
    updates = same_work.measured["updates"]
    warmup = int(get_chapter(CHAPTER).config("cpu")["warmup"])
    drawn = sorted(step["step"] for step in updates["steps"])
    assert drawn == list(range(warmup, warmup + len(drawn))) and len(drawn) >= 16 == updates["drawn"]
    assert updates["worst"] < updates["tolerance"] == 0.005
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


def test_the_update_check_tells_a_step_on_part_of_its_pixels_from_a_whole_one(tmp_path):
    """The referee's update check on chapter 06's keyed draws, without a run: one SGD step (momentum 0.9) on a window
    draw's whole batch with the slow script's loss lands at 0 from the referee's; the same step with the mask loss
    over every other row of pixels (red team 59's halfpixels_06) lands past the CPU tolerance; a draw not made from
    the window key is refused."""
    import torch
    from torch.nn import functional as F

    from checker.base.workloads import SALT_STRIDE, load_workload_module
    from checker.grader.referee import update_errors

    chapter = get_chapter(CHAPTER)
    cfg = dict(chapter.config("cpu"), seed=3)
    workload = load_workload_module(chapter.dir).build(cfg, torch.device("cpu"))
    model, reference = workload.model, workload.extras["probe_loss"]
    parameters = [p for p in model.parameters() if p.requires_grad]
    key, seed = 41, 41 * SALT_STRIDE + 7
    batch = workload.batches.draw(seed)

    def thinned(model, made):  # the mask loss on half the rows of pixels, the class loss as it is
        images, flat_masks, flat_classes, n_objects = made
        mask_logits, class_logits = model(images)
        image_of = torch.repeat_interleave(torch.arange(n_objects.shape[0]), n_objects)
        slot_of = torch.arange(image_of.shape[0]) - (torch.cumsum(n_objects, 0) - n_objects)[image_of]
        loss = F.binary_cross_entropy_with_logits(mask_logits[image_of, slot_of][..., ::2, :], flat_masks[..., ::2, :])
        present, counts = torch.unique(flat_classes, return_counts=True)
        weight = torch.zeros(class_logits.shape[-1])
        weight[present] = 1.0 / counts.float()
        return loss + F.cross_entropy(class_logits[image_of, slot_of], flat_classes, weight=weight)

    def one_step(loss_of) -> float:
        torch.manual_seed(0)
        for p in parameters:
            p.data.normal_(0, 0.1)
        w0 = torch.nn.utils.parameters_to_vector(parameters).detach().clone()
        previous = torch.randn_like(w0) * 0.01  # the momentum buffer a step before left: w1 = w0 - lr * previous
        w1 = w0 - cfg["lr"] * previous
        torch.nn.utils.vector_to_parameters(w1, parameters)
        model.zero_grad(set_to_none=True)
        loss_of(model, batch).backward()
        grad = torch.cat([p.grad.reshape(-1) for p in parameters])
        w2 = w1 - cfg["lr"] * (0.9 * previous + grad)
        torch.nn.utils.vector_to_parameters(w2, parameters)  # the weights the run sent, as the referee loads them
        path = tmp_path / "updates.pt"
        torch.save({"snapshots": {6: w0, 7: w1, 8: w2}, "places": {7: [seed]}, "last": w2.detach()}, path)
        return update_errors(workload, cfg, torch.device("cpu"), path, [7], key)["worst"]

    assert one_step(reference) < 1e-4
    assert one_step(thinned) > 0.005  # update_tolerance.cpu in chapter.toml
    path = tmp_path / "updates.pt"
    sent = torch.nn.utils.parameters_to_vector(parameters).detach()
    torch.save({"snapshots": {6: torch.zeros(1), 7: torch.zeros(1), 8: torch.zeros(1)}, "places": {7: [seed]},
                "last": sent}, path)
    assert "no tensors" in update_errors(workload, cfg, torch.device("cpu"), path, [7], key)["error"]
    flat = torch.zeros(sum(p.numel() for p in parameters))
    torch.save({"snapshots": {6: flat, 7: flat, 8: flat}, "places": {7: [seed]}, "last": sent}, path)
    assert "not one of the window's draws" in update_errors(workload, cfg, torch.device("cpu"), path, [7], 42)["error"]
