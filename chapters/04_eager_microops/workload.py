"""Chapter 04's workload: a deep, narrow classifier whose layers are written out one small op at a time.

Each block is a layer norm, a linear layer, an activation and a gated residual, written the way research
code often is: one line per tensor op. In eager mode every one of those ops is its own kernel launch, on
tensors so small (batch x width, a few hundred KiB) that the GPU finishes each kernel before the CPU has
launched the next. The model, the data and the loss are fixed: the learner changes how the step runs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from checker.base.workloads import KeyedOrder, Workload

NUM_CLASSES = 10
IN_FEATURES = 32
NOISE = 2.0  # classes overlap at this noise: the held-out loss settles well above zero, so it compares well


# --8<-- [start:model]
class MicroBlock(nn.Module):
    """x + sigmoid(gate) * swish(linear(layer_norm(x))), one small op per line: ~16 kernels forward, ~30 backward."""

    def __init__(self, width: int):
        super().__init__()
        self.norm_weight = nn.Parameter(torch.ones(width))
        self.norm_bias = nn.Parameter(torch.zeros(width))
        self.fc = nn.Linear(width, width)
        self.act_slope = nn.Parameter(torch.ones(width))
        self.gate = nn.Parameter(torch.full((width,), -1.0))  # sigmoid(-1) = 0.27: each block starts near identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)  # a layer norm written out: nine kernels where F.layer_norm is one
        centered = x - mean
        variance = (centered * centered).mean(dim=-1, keepdim=True)
        h = centered * torch.rsqrt(variance + 1e-5)
        h = h * self.norm_weight + self.norm_bias
        h = self.fc(h)
        h = h * torch.sigmoid(h * self.act_slope)  # a swish with a learned slope: three more
        return x + torch.sigmoid(self.gate) * h  # a learned gate on the residual branch: three more
# --8<-- [end:model]


def make_model(width: int, blocks: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(IN_FEATURES, width),
        *[MicroBlock(width) for _ in range(blocks)],
        nn.Linear(width, NUM_CLASSES),
    )


def make_samples(templates: torch.Tensor, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sample is its class's template plus noise: learnable, and the same for every run with one seed."""
    labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator)
    noise = NOISE * torch.randn(count, IN_FEATURES, generator=generator)
    return templates[labels] + noise, labels


def build(cfg: dict, device: torch.device) -> Workload:
    if device.type == "cpu":
        # The same for every variant: tensors this small gain nothing from threads, and one thread keeps
        # compiled code (its own OpenMP runtime) from spinning against PyTorch's on a small machine.
        torch.set_num_threads(int(cfg.get("cpu_threads", 1)))
    generator = torch.Generator().manual_seed(int(cfg.get("seed", 0)))
    templates = torch.randn(NUM_CLASSES, IN_FEATURES, generator=generator)
    batch_size = int(cfg["batch_size"])  # fixed: a larger batch raises samples/s but changes the work
    batches = []
    for _ in range(int(cfg["distinct_batches"])):
        inputs, labels = make_samples(templates, batch_size, generator)
        batches.append((inputs.to(device), labels.to(device)))
    eval_inputs, eval_labels = make_samples(templates, int(cfg.get("eval_size", 2048)), generator)
    eval_inputs, eval_labels = eval_inputs.to(device), eval_labels.to(device)
    order = KeyedOrder(batches)  # in order through warm-up, then in an order drawn from the window key
    model = make_model(int(cfg["width"]), int(cfg["blocks"])).to(device)

    def eval_loss(trained: nn.Module) -> float:
        return F.cross_entropy(trained(eval_inputs), eval_labels).item()

    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, batches=order,
                    on_window=order.set_key)
