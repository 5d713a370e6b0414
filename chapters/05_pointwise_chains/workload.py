"""Chapter 05's workload: blocks of one linear layer followed by a long fp32 chain of elementwise work.

Each block computes a gate (sigmoid), multiplies it into a gelu, layer-normalizes, adds a bias, scales and
adds the residual: seven passes over a large activation forward and about twice that backward, each one a
separate kernel that reads and writes the whole tensor in fp32. The linear layers run on tensor cores (TF32,
the same for every variant), so the step's time goes to those passes: it is memory-bound. The model, the
data and the loss are fixed: the learner changes how the step runs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from checker.base.workloads import KeyedOrder, Workload


# --8<-- [start:model]
class PointwiseBlock(nn.Module):
    """x + scale * (layer_norm(gelu(proj(x)) * sigmoid(proj(x))) + bias): one matmul, then a chain of passes."""

    def __init__(self, width: int):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.bias = nn.Parameter(torch.zeros(width))
        self.scale = nn.Parameter(torch.full((width,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        gate = torch.sigmoid(h)  # pass 1: read h, write gate
        h = F.gelu(h) * gate  # passes 2 and 3
        h = self.norm(h)  # pass 4: a reduction per row, then a write
        h = h + self.bias  # pass 5
        return x + h * self.scale  # passes 6 and 7: scale, then the residual
# --8<-- [end:model]


def make_model(width: int, blocks: int) -> nn.Module:
    return nn.Sequential(*[PointwiseBlock(width) for _ in range(blocks)])


def make_samples(teacher: torch.Tensor, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs are Gaussian; targets are a fixed random smooth map of them: the same for every run with one seed."""
    inputs = torch.randn(count, teacher.shape[0], generator=generator)
    return inputs, torch.tanh(inputs @ teacher)


def build(cfg: dict, device: torch.device) -> Workload:
    if device.type == "cuda":
        # The same for every variant: matmuls on TF32 tensor cores, so the chain, not the matmul, is the lesson.
        torch.backends.cuda.matmul.allow_tf32 = True
    else:
        # One thread keeps compiled code (its own OpenMP runtime) from spinning against PyTorch's on a small machine.
        torch.set_num_threads(int(cfg.get("cpu_threads", 1)))
    generator = torch.Generator().manual_seed(int(cfg.get("seed", 0)))
    width = int(cfg["width"])
    teacher = torch.randn(width, width, generator=generator) / width**0.5
    tokens = int(cfg["batch_size"])  # rows per batch: the activation is tokens x width fp32 values
    batches = []
    for _ in range(int(cfg["distinct_batches"])):
        inputs, targets = make_samples(teacher, tokens, generator)
        batches.append((inputs.to(device), targets.to(device)))
    eval_inputs, eval_targets = make_samples(teacher, int(cfg.get("eval_size", 4096)), generator)
    eval_inputs, eval_targets = eval_inputs.to(device), eval_targets.to(device)
    order = KeyedOrder(batches)  # in order through warm-up, then in an order drawn from the window key
    model = make_model(width, int(cfg["blocks"])).to(device)

    def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(outputs.float(), targets)  # in fp32 whatever the forward ran in

    def eval_loss(trained: nn.Module) -> float:
        return loss_fn(trained(eval_inputs), eval_targets).item()

    return Workload(model=model, loss_fn=loss_fn, eval_loss=eval_loss, batches=order,
                    on_window=order.set_key)
