"""Chapter 01's workload: a small CNN classifying synthetic 32x32 images, with its batches already on the device.

The data is on the device from the start so that nothing but the training step itself is measured: this
chapter is about what the step does on the host, not about feeding it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from checker.lab import Workload

NUM_CLASSES = 10
IMAGE_SIZE = 32


def make_model(width: int, blocks: int) -> nn.Module:
    """conv-bn-relu blocks at constant width, global average pooling, a linear head."""
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    for index in range(blocks):
        stride = 2 if index in (blocks // 3, 2 * blocks // 3) else 1  # two downsamplings along the way
        layers += [nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, NUM_CLASSES)]
    return nn.Sequential(*layers)


def make_images(templates: torch.Tensor, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image is its class's template plus noise: learnable, and the same for every run with one seed."""
    labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator)
    noise = torch.randn(count, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    return templates[labels] + noise, labels


def build(cfg: dict, device: torch.device) -> Workload:
    generator = torch.Generator().manual_seed(int(cfg.get("seed", 0)))
    templates = torch.randn(NUM_CLASSES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    batch_size = int(cfg["batch_size"])
    batches = []
    for _ in range(int(cfg["distinct_batches"])):
        images, labels = make_images(templates, batch_size, generator)
        batches.append((images.to(device), labels.to(device)))
    eval_images, eval_labels = make_images(templates, int(cfg.get("eval_size", 512)), generator)
    eval_images, eval_labels = eval_images.to(device), eval_labels.to(device)
    model = make_model(int(cfg["width"]), int(cfg["blocks"])).to(device)

    def eval_loss(trained: nn.Module) -> float:
        return F.cross_entropy(trained(eval_images), eval_labels).item()

    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, batches=batches)
