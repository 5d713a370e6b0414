"""Chapter 07's workload: a torchvision ResNet-18 on CIFAR-sized images, fed by a per-sample CPU pipeline.

The model is torchvision's ResNet-18 as CIFAR training adapts it: a 3x3 stem with stride 1 and no max-pool,
so a 32x32 image keeps 32x32 feature maps in the first stage (the ImageNet stem would shrink it to 8x8 and
leave the GPU almost nothing to do). The images are made here, from a seed (nothing is downloaded): one
smooth colour pattern per class plus noise, held in memory as uint8, 3 x 32 x 32 each, like CIFAR-10.

Every sample goes through what a CIFAR pipeline does on the CPU: a random crop from the image padded by 4
pixels, a random horizontal flip, then float32 and per-channel normalization. The dataset hands out float32
samples; `extras["uint8_dataset"]` hands out the same crops and flips as uint8, for a pipeline that normalizes
on the GPU instead (`extras["normalize"]`, the same arithmetic): a quarter of the bytes to collate, pin and copy.

The random choices of each sample come from its epoch's salt (the window key's, once the timed window is
open): every variant trains on the same pixels whatever its number of worker processes, and none can make
the window's samples before it.
"""

from __future__ import annotations

import random

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset
from torchvision.models import resnet18

from checker.base.workloads import KeyedEpochs, Workload

NUM_CLASSES = 10
PAD = 4  # random crops come from the image padded by this many pixels (the usual CIFAR augmentation)
MEAN = (0.4914, 0.4822, 0.4465)  # CIFAR-10's channel statistics, as CIFAR training scripts normalize
STD = (0.2470, 0.2435, 0.2616)


def make_model() -> nn.Module:
    """torchvision's ResNet-18 (random weights), with the stem CIFAR training uses for 32x32 images."""
    model = resnet18(weights=None, num_classes=NUM_CLASSES)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N x) 3 x H x W -> normalized float32, wherever the tensor is (CPU worker or GPU)."""
    shape = (3, 1, 1) if images.dim() == 3 else (1, 3, 1, 1)
    mean = torch.tensor(MEAN, device=images.device).view(shape)
    std = torch.tensor(STD, device=images.device).view(shape)
    return (images.float() / 255 - mean) / std


def make_images(count: int, size: int, templates: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` uint8 images, each its class's smooth colour pattern (upsampled from 4x4) plus noise."""
    labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator)
    patterns = F.interpolate(templates[labels], size=(size, size), mode="bilinear", align_corners=False)
    noise = torch.randn(count, 3, size, size, generator=generator)
    images = ((patterns + 0.6 * noise) * 48 + 128).clamp(0, 255).to(torch.uint8)
    return images, labels


class AugmentedImages(Dataset):
    """Random crop (from the image padded by PAD) and horizontal flip per sample, on the CPU; then normalized
    float32 (``raw=False``) or left uint8 (``raw=True``) for the GPU to normalize."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, length: int, seed: int, raw: bool):
        # labels as Python ints and random choices from Python's generator: no tensor is read back to the host
        # in __getitem__ (on a CPU trace such reads look like the syncs the check counts)
        self.images, self.labels, self.length, self.seed, self.raw = images, labels.tolist(), length, seed, raw

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        # KeyedEpochs gives (index, the epoch's salt): an epoch after the window opened draws from the window key
        index, salt = item if isinstance(item, tuple) else (item, self.seed)
        slot = (index * 7919) % len(self.images)
        rng = random.Random(salt * 1_000_003 + index)  # this sample's own random choices
        dy, dx, flip = rng.randint(0, 2 * PAD), rng.randint(0, 2 * PAD), rng.random() < 0.5
        image = F.pad(self.images[slot], (PAD, PAD, PAD, PAD))[:, dy:dy + self.images.shape[-2], dx:dx + self.images.shape[-1]]
        if flip:
            image = image.flip(-1)
        return (image.contiguous() if self.raw else normalize(image)), self.labels[slot]


def build(cfg: dict, device: torch.device) -> Workload:
    if device.type == "cuda":
        # The slow script starts from PyTorch's defaults: cuDNN picks algorithms by heuristics (benchmark off).
        # Turning benchmark mode on is the first lever of the ladder, in the learner's script.
        torch.backends.cudnn.benchmark = False
    else:
        torch.set_num_threads(int(cfg.get("cpu_threads", 1)))  # the model on one core; the others for the loader
    seed = int(cfg.get("seed", 0))
    generator = torch.Generator().manual_seed(seed)
    size, batch_size = int(cfg["image_size"]), int(cfg["batch_size"])
    templates = torch.rand(NUM_CLASSES, 3, 4, 4, generator=generator) * 2 - 1
    images, labels = make_images(int(cfg["pool_size"]), size, templates, generator)
    length = int(cfg["epoch_batches"]) * batch_size  # an epoch is epoch_batches batches: runs cross epochs
    dataset = AugmentedImages(images, labels, length, seed, raw=False)
    uint8_dataset = AugmentedImages(images, labels, length, seed, raw=True)

    eval_images, eval_labels = make_images(int(cfg.get("eval_size", 512)), size, templates, generator)
    eval_images, eval_labels = normalize(eval_images).to(device), eval_labels.to(device)
    model = make_model().to(device)

    def eval_loss(trained: nn.Module) -> float:
        losses = [F.cross_entropy(trained(x), y, reduction="sum") for x, y in
                  zip(eval_images.split(256), eval_labels.split(256))]
        return (torch.stack(losses).sum() / len(eval_labels)).item()

    sampler = KeyedEpochs(length, seed + 1)
    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, dataset=dataset,
                    extras={"sampler": sampler, "uint8_dataset": uint8_dataset, "normalize": normalize},
                    on_window=sampler.set_key)
