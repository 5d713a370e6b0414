"""The grader's own look at trained weights, in a fresh process that no candidate code ever ran in.

    python -I -B -c <bootstrap> job.json      (the grader writes the job; this prints one JSON object)

For each run it rebuilds the chapter's model from the run's seed, exactly as the harness built it, loads the
weights the run sent back into it (strictly: every tensor, same names, same shapes), and evaluates the
held-out loss with the chapter's own ``eval_loss``. For a candidate run it also measures how far its weights
are from those of the baseline run that trained under the same seed and window key, relative to how far the
baseline's training moved them (see :func:`distance`): a run that trained fewer steps, on part of each batch
or only some of the layers lands far away; an honest rewrite of the same training lands close.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

from checker.base.chapters import get_chapter
from checker.base.workloads import KeyedDraws, head_values, initial_rms, load_workload_module


def reference_weights(model: torch.nn.Module, window_key: int, rms: dict[str, float]) -> dict[str, torch.Tensor]:
    """Where training starts from, per tensor: the initial weights, with the head as the window key drew it."""
    start = {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in model.state_dict().items()
             if v.is_floating_point()}
    start.update(head_values(model, window_key, rms))
    return start


def distance(candidate: dict[str, torch.Tensor], baseline: dict[str, torch.Tensor],
             start: dict[str, torch.Tensor]) -> dict[str, Any]:
    """How far the candidate's weights are from the baseline's, in units of how far training moved them.

    ``relative``: ||candidate - baseline|| / ||baseline - start|| over every floating tensor together;
    ``worst_tensor``: the largest such ratio of any one tensor that training moved noticeably (a layer left
    untrained shows up here even when the rest is right), with its name. Integer buffers (BatchNorm's count of
    batches seen) must match exactly: ``counts_differ`` names those that do not.
    """
    diff_sq = move_sq = 0.0
    worst, worst_name = 0.0, None
    moves = {}
    for key, base in baseline.items():
        if not base.is_floating_point():
            continue
        base = base.float()
        move = float((base - start[key]).norm()) if key in start else float(base.norm())
        moves[key] = move
    typical = sorted(moves.values())[len(moves) // 2] if moves else 0.0
    for key, move in moves.items():
        diff = float((candidate[key].float() - baseline[key].float()).norm())
        diff_sq += diff * diff
        move_sq += move * move
        if move > 0.05 * typical and move > 0:
            ratio = diff / move
            if ratio > worst or not math.isfinite(ratio):
                worst, worst_name = ratio, key
    counts_differ = [k for k, v in baseline.items() if not v.is_floating_point() and not torch.equal(v, candidate[k])]
    relative = math.sqrt(diff_sq) / math.sqrt(move_sq) if move_sq > 0 else float("inf")
    return {"relative": relative, "worst_tensor": worst, "worst_tensor_name": worst_name,
            "counts_differ": counts_differ}


def update_errors(workload, cfg: dict[str, Any], device: torch.device, path: Path, steps: list[int],
                  window_key: int) -> dict[str, Any]:
    """For each window step the grader drew, the update the run's weights took in that step against one SGD step
    (the chapter's lr, ``probe_momentum``, ``probe_weight_decay``) on that step's whole batch.

    SGD with momentum moves w by -lr * m, where m = momentum * m_before + grad + weight_decay * w: so the tensors
    before the step before (w0), before the step (w1) and after it (w2) give the gradient the step applied,
    (w1 - w2) / lr - momentum * (w0 - w1) / lr - weight_decay * w1, whatever the optimizer's state was. The grader
    computes the batch's gradient at w1 here, in float32 with TF32 off, on the batch the step fetched: its place
    in its epoch, rebuilt from the sampler's own order (a place that is not one of the run's epochs is refused), or
    the keyed draw it came from, drawn again (a draw not made from the window key is refused); the loss is the
    workload's ``probe_loss(model, batch)`` where it has one (a chapter whose loss is the script's), else its
    ``loss_fn(model(images), labels)``.
    ``relative``: ||applied - gradient|| / ||gradient||: a few hundredths for an honest float32 step, about a tenth
    for bf16's arithmetic, half or more for a step on half its batch, and the whole for a step skipped."""
    data = torch.load(path, map_location="cpu", weights_only=True)
    snapshots, places = data.get("snapshots", {}), data.get("places", {})
    before_open = data.get("before_open", {})  # the window's first step: its head redrawn after the step before
    model = workload.model
    parameters = [p for p in model.parameters() if p.requires_grad]
    count = sum(p.numel() for p in parameters)
    # the tensors the harness kept at the window's close are the weights the run sent (loaded into the model now):
    # snapshots of other tensors than those trained would show a path the training never took
    last = data.get("last")
    sent = torch.nn.utils.parameters_to_vector(parameters).detach().to("cpu", torch.float32)
    if not isinstance(last, torch.Tensor) or last.shape != sent.shape or not torch.equal(last.to(torch.float32), sent):
        return {"error": "the tensors the harness kept at the window's close are not the weights the run sent"}
    lr, momentum, decay = float(cfg["lr"]), float(cfg["probe_momentum"]), float(cfg["probe_weight_decay"])
    batch = int(cfg["batch_size"])
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    found = []
    wide: dict[int, torch.Tensor] = {}  # each snapshot in float64 once: consecutive drawn steps share two of three
    try:
        for step in sorted(steps):
            tensors = [snapshots.get(k) for k in (step - 1, step, step + 1)]
            if any(not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() != count for t in tensors):
                return {"error": f"the run sent no tensors of the model's {count:,} trainable values around step {step}"}
            made = step_batch(workload, places.get(step), batch, window_key, device)
            if isinstance(made, str):
                return {"error": f"step {step}'s {made}"}
            for k in [k for k in wide if k < step - 1]:
                del wide[k]
            for k, t in zip((step - 1, step, step + 1), tensors):
                if k not in wide:
                    wide[k] = t.to(device, torch.float64)
            w0, w1, w2 = wide[step - 1], wide[step], wide[step + 1]
            # the momentum the step started from: the step before's update, up to the head's redraw at the window's
            # opening where that step was the last of the warm-up
            opened = before_open.get(step)
            moved = opened.to(device, torch.float64) if isinstance(opened, torch.Tensor) and opened.shape == w1.shape \
                else w1
            applied = (w1 - w2) / lr - momentum * (w0 - moved) / lr - decay * w1
            torch.nn.utils.vector_to_parameters(w1.float(), parameters)
            model.train()
            model.zero_grad(set_to_none=True)
            loss_of = workload.extras.get("probe_loss") or _images_loss(workload)
            loss_of(model, made).backward()
            gradient = _flat_gradient(parameters)
            relative = float((applied - gradient).norm() / gradient.norm())
            entry = {"step": step, "relative": round(relative, 5) if math.isfinite(relative) else relative,
                     "gradient_norm": float(gradient.norm()), "applied_norm": float(applied.norm())}
            if device.type == "cuda" and str(cfg.get("amp", "none")) == "bf16":
                # shown, not judged: how far bf16 autocast's own arithmetic moves this step's gradient from the
                # float32 one, at the same weights and batch (the noise an honest bf16 step carries here)
                model.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = loss_of(model, made)
                loss.backward()
                entry["bf16_noise"] = round(float((_flat_gradient(parameters) - gradient).norm() / gradient.norm()), 5)
            found.append(entry)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        model.zero_grad(set_to_none=True)
    worst = max((f["relative"] for f in found), default=None)
    return {"steps": found, "worst": worst}


def step_batch(workload, place: Any, batch: int, window_key: int, device: torch.device) -> Any:
    """The batch a window step fetched, made again from its place (``UpdateProbe.places``): a (salt, position) of
    the workload's sampler's epochs, or the (seed,) of one of its keyed draws. A string says why there is none."""
    if not isinstance(place, (list, tuple)) or len(place) not in (1, 2):
        return "place was not sent"
    source = workload.batches
    if len(place) == 1:
        seed = int(place[0])
        if not isinstance(source, KeyedDraws) or not KeyedDraws.is_window_draw(seed, window_key):
            return f"batch is not one of the window's draws (seed {seed})"
        return source.draw(seed)
    salt, position = int(place[0]), int(place[1])
    sampler = workload.extras.get("sampler")
    if sampler is None or not sampler.is_salt(salt, window_key) or position % batch \
            or not 0 <= position <= sampler.size - batch:
        return f"batch is not one of the run's epochs' (salt {salt}, position {position})"
    samples = [workload.dataset[item] for item in sampler.epoch_items(salt)[position:position + batch]]
    return torch.stack([s[0] for s in samples]).to(device), torch.tensor([int(s[1]) for s in samples], device=device)


def _images_loss(workload):
    """The loss of a batch of (images, labels): the workload's own loss function of the model's output."""
    return lambda model, made: workload.loss_fn(model(made[0]), made[1])


def _flat_gradient(parameters: list[torch.Tensor]) -> torch.Tensor:
    """The gradients the last backward stored into ``parameters``, as one float64 vector."""
    return torch.cat([p.grad.reshape(-1) for p in parameters]).to(torch.float64)


def _load(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError("not a state_dict of tensors")
    return state


def judge(job: dict[str, Any]) -> dict[str, Any]:
    chapter = get_chapter(job["chapter"])
    device = torch.device(job["device"])
    workload_module = load_workload_module(chapter.dir)
    runs = {run["name"]: run for run in job["runs"]}
    out: dict[str, Any] = {}
    states: dict[str, dict[str, torch.Tensor]] = {}
    built: dict[int, tuple] = {}
    cfg_of: dict[int, dict[str, Any]] = {}
    for name, run in runs.items():
        seed = int(run["seed"])
        if seed not in built:
            cfg = cfg_of[seed] = dict(chapter.config(job["device"]), **job.get("cfg", {}), seed=seed)
            torch.manual_seed(seed)
            workload = workload_module.build(cfg, device)
            initial = {k: v.detach().clone() for k, v in workload.model.state_dict().items()}
            built[seed] = (workload, initial, initial_rms(workload.model))
        workload, initial, rms = built[seed]
        # the model's trainable tensors: each gets its gradient once per backward pass (checker.checks.same_work)
        result: dict[str, Any] = {"parameters": sum(1 for p in workload.model.parameters() if p.requires_grad)}
        try:
            state = _load(Path(run["weights"]))
            workload.model.load_state_dict(state, strict=True)
            states[name] = {k: v.detach().to("cpu", copy=True) for k, v in workload.model.state_dict().items()}
            workload.model.eval()
            with torch.no_grad():
                result["eval_loss"] = float(workload.eval_loss(workload.model))
            if run.get("updates"):
                try:
                    result["updates"] = update_errors(workload, cfg_of[seed], device, Path(run["updates"]),
                                                      [int(s) for s in run.get("probe_steps", [])],
                                                      int(run["window_key"]))
                except Exception as err:  # noqa: BLE001 - tensors that do not load are updates not shown
                    result["updates"] = {"error": f"the tensors of its updates did not load: {type(err).__name__}"}
        except Exception as err:  # noqa: BLE001 - whatever the weights are, the verdict is "they do not fit"
            result["load_error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err).strip() else ''}"
        finally:
            workload.model.load_state_dict(initial)
        out[name] = result
    for name, run in runs.items():
        reference = run.get("reference")
        if reference and name in states and reference in states:
            workload, initial, rms = built[int(run["seed"])]
            workload.model.load_state_dict(initial)
            start = reference_weights(workload.model, int(run["window_key"]), rms)
            out[name]["distance"] = distance(states[name], states[reference], start)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text())
    print(json.dumps(judge(job)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
