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

from checker.base.workloads import load_workload_module
from checker.base.chapters import get_chapter
from checker.base.workloads import head_values, initial_rms


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
    for name, run in runs.items():
        seed = int(run["seed"])
        if seed not in built:
            cfg = dict(chapter.config(job["device"]), **job.get("cfg", {}), seed=seed)
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
