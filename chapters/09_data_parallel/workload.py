"""Chapter 09's workload: an MLP trained data-parallel on two ranks, on samples held in memory.

The samples are a fixed table (inputs and a class from a random teacher network, so the task is learnable),
read by position through :class:`checker.base.ranks.LoggedSamples`: each rank's reads are recorded, so the grader
can see which samples every rank trained in every step. The held-out batch is what a rank's "small evaluation"
runs on (the slow script's rank 0 runs it every step).

The work of one optimizer step is fixed: ``global_batch`` samples, the next ones in order, split across the
ranks however the script likes, with the mean loss over them. A job that trains the same samples on both ranks
does twice the arithmetic for the same step.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from checker.base.ranks import LoggedSamples
from checker.base.workloads import Workload


def make_model(in_features: int, width: int, layers: int, classes: int) -> nn.Module:
    """``layers`` linear layers of ``width`` with ReLU between them, then a linear head."""
    blocks: list[nn.Module] = [nn.Linear(in_features, width), nn.ReLU()]
    for _ in range(layers - 1):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    blocks.append(nn.Linear(width, classes))
    return nn.Sequential(*blocks)


def make_samples(count: int, in_features: int, teacher: torch.Tensor, generator: torch.Generator):
    """Inputs from a normal distribution; each one's class is the teacher's highest score."""
    inputs = torch.randn(count, in_features, generator=generator)
    return inputs, (inputs @ teacher).argmax(dim=1)


def build(cfg: dict, device: torch.device) -> Workload:
    if device.type == "cpu":
        torch.set_num_threads(1)  # two ranks share the CPU's cores: one thread each, so neither starves the other
    generator = torch.Generator().manual_seed(int(cfg.get("seed", 0)))
    in_features, classes = int(cfg["in_features"]), int(cfg["classes"])
    teacher = torch.randn(in_features, classes, generator=generator)
    inputs, targets = make_samples(int(cfg["dataset_size"]), in_features, teacher, generator)
    eval_inputs, eval_targets = make_samples(int(cfg["eval_size"]), in_features, teacher, generator)
    eval_inputs, eval_targets = eval_inputs.to(device), eval_targets.to(device)
    samples = LoggedSamples(inputs, targets)
    model = make_model(in_features, int(cfg["width"]), int(cfg["layers"]), classes).to(device)

    def eval_loss(trained: nn.Module) -> float:
        with torch.no_grad():
            return F.cross_entropy(trained(eval_inputs), eval_targets).item()

    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, dataset=samples,
                    extras={"eval_inputs": eval_inputs, "eval_targets": eval_targets}, on_window=samples.set_key)
