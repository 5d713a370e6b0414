"""Chapter 01's workload: a small CNN on synthetic 32x32 images, fed by a light host-side pipeline.

Every step, the host prepares the next batch, as most real training loops do: it gathers uint8 images from
a dataset held in memory, crops and flips them, normalizes them and pins them for an asynchronous copy. The
work is the same in every variant. When the GPU's queue holds the previous step's kernels, that preparation
overlaps with them; when a host read has drained the queue, the GPU waits for it. That is the lesson.
"""

from __future__ import annotations

import random

import torch
from torch import nn
from torch.nn import functional as F

from checker.base.workloads import Workload

NUM_CLASSES = 10
IMAGE_SIZE = 32
PAD = 4                 # random crops are taken from images padded by this many pixels
MEAN, STD = 0.5, 0.25   # normalization of [0, 1] pixel values


def make_model(width: int, blocks: int) -> nn.Module:
    """conv-bn-relu blocks at constant width, global average pooling, a linear head."""
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    for index in range(blocks):
        stride = 2 if index in (blocks // 3, 2 * blocks // 3) else 1  # two downsamplings along the way
        layers += [nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, NUM_CLASSES)]
    return nn.Sequential(*layers)


def make_templates(generator: torch.Generator) -> torch.Tensor:
    """One smooth pattern per class (upsampled from 4x4), so that a shifted or flipped image still resembles it."""
    coarse = torch.randn(NUM_CLASSES, 3, 4, 4, generator=generator)
    return F.interpolate(coarse, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False)


def make_dataset(templates: torch.Tensor, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images, each its class's template plus noise: learnable, and the same for every run with one seed."""
    labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator)
    noise = torch.randn(count, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    images = ((templates[labels] + 0.5 * noise) * 40 + 128).clamp(0, 255).to(torch.uint8)
    return images, labels


def normalize(images: torch.Tensor) -> torch.Tensor:
    return (images.float() / 255 - MEAN) / STD


class HostBatches:
    """Batches prepared on the host each step: gather, random crop, flip, normalize, pin.

    Re-iterable: each pass is one epoch of ``batches_per_epoch`` batches; the random stream continues across
    epochs, so every variant sees the same batches in the same order.
    """

    def __init__(self, images, labels, batch_size: int, batches_per_epoch: int, seed: int, pin: bool):
        self.images, self.labels = images, labels
        self.batch_size, self.batches_per_epoch, self.pin = batch_size, batches_per_epoch, pin
        self.generator = torch.Generator().manual_seed(seed)
        self.crops = random.Random(seed)  # the crops' offsets, drawn in Python: the grader's code reads no tensor

    def set_key(self, window_key: int) -> None:
        """From the timed window on, batches come from the grader's window key: none can be made before it."""
        self.generator = torch.Generator().manual_seed(window_key)
        self.crops = random.Random(window_key)

    def __iter__(self):
        for _ in range(self.batches_per_epoch):
            yield self.make_batch()

    def make_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.generator
        index = torch.randint(0, len(self.images), (self.batch_size,), generator=g)
        images = F.pad(self.images[index], (PAD, PAD, PAD, PAD))
        dx, dy = self.crops.randrange(2 * PAD + 1), self.crops.randrange(2 * PAD + 1)
        images = images[:, :, dy:dy + IMAGE_SIZE, dx:dx + IMAGE_SIZE]
        flip = (torch.rand(self.batch_size, generator=g) < 0.5).view(-1, 1, 1, 1)
        images = normalize(torch.where(flip, images.flip(3), images))
        labels = self.labels[index]
        if self.pin:  # page-locked, so that .to(device, non_blocking=True) is a queued copy, not a wait
            images, labels = images.pin_memory(), labels.pin_memory()
        return images, labels


def build(cfg: dict, device: torch.device) -> Workload:
    if device.type == "cuda":
        # the host pipeline's threads: a main process usually leaves most cores to other work
        torch.set_num_threads(int(cfg.get("host_threads", 2)))
    generator = torch.Generator().manual_seed(int(cfg.get("seed", 0)))
    templates = make_templates(generator)
    images, labels = make_dataset(templates, int(cfg["dataset_size"]), generator)
    eval_images, eval_labels = make_dataset(templates, int(cfg.get("eval_size", 512)), generator)
    eval_images, eval_labels = normalize(eval_images).to(device), eval_labels.to(device)
    batches = HostBatches(images, labels, int(cfg["batch_size"]), int(cfg.get("batches_per_epoch", 100)),
                          seed=int(cfg.get("seed", 0)) + 1, pin=device.type == "cuda")
    model = make_model(int(cfg["width"]), int(cfg["blocks"])).to(device)

    def eval_loss(trained: nn.Module) -> float:
        return F.cross_entropy(trained(eval_images), eval_labels).item()

    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, batches=batches,
                    on_window=batches.set_key)
