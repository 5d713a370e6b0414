"""Chapter 02's workload: a torchvision ResNet fed ImageNet-sized float32 batches through a DataLoader.

Each sample is a 3x224x224 float32 image (588 KiB), the shape a CPU pipeline that decodes, crops and
normalizes hands to the GPU, so a batch of 256 is about 150 MB: large enough that its host-to-device copy is
plain to see in a trace. The batches are ready in memory (as the output of an offline preprocessing pass, or
a memory-mapped shard, would be), so reading one costs nothing and the copy is what remains.

The model average-pools the image by ``downscale`` on the GPU before the network sees it: the copy stays
ImageNet-sized while the compute per sample stays small enough that the copy decides the step time, as it
does for any model that is cheap next to its input.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset
from torchvision.models import get_model

from checker.base.workloads import Workload

NUM_CLASSES = 10


class ReadyBatches(Dataset):
    """Whole batches of normalized float32 images, each a contiguous slice of an in-memory pool.

    Item ``i`` is batch ``i``: load it with ``DataLoader(dataset, batch_size=None)``. It is a view into the
    pool, in ordinary (pageable) memory that is already resident: no decoding, no augmentation, no collating.
    Loading is not this chapter's subject (chapter 03 is); the copy to the GPU is.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, length: int):
        if len(images) < batch_size:
            raise ValueError(f"pool_size ({len(images)}) must hold at least one batch ({batch_size})")
        self.images, self.labels, self.batch_size, self.length = images, labels, batch_size, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        slots = len(self.images) // self.batch_size
        start = ((index * 7919) % slots) * self.batch_size  # a fixed scramble of the pool's batches
        return self.images[start:start + self.batch_size], self.labels[start:start + self.batch_size]


def make_images(count: int, size: int, templates: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image is its class's smooth colour pattern, upsampled to ``size``, plus noise: learnable, seeded."""
    labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator)
    images = torch.empty(count, 3, size, size)
    for start in range(0, count, 64):  # in chunks, so the upsampled temporaries stay small
        chunk = labels[start:start + 64]
        patterns = F.interpolate(templates[chunk], size=(size, size), mode="bilinear", align_corners=False)
        images[start:start + len(chunk)] = patterns + 0.5 * torch.randn(patterns.shape, generator=generator)
    return images, labels


def make_model(arch: str, downscale: int) -> nn.Module:
    """A torchvision model (random weights: nothing is downloaded), after an average pool on the GPU."""
    network = get_model(arch, weights=None, num_classes=NUM_CLASSES)
    return nn.Sequential(nn.AvgPool2d(downscale), network) if downscale > 1 else network


def build(cfg: dict, device: torch.device) -> Workload:
    if device.type == "cuda":
        # cuDNN picks its algorithms by heuristics, not by timing them (benchmark mode): the timed pick differs
        # from run to run, and so would the numerics, which would blur the weights the referee compares
        torch.backends.cudnn.benchmark = False
    else:
        torch.set_num_threads(1)  # the CPU run only has to work, not be fast: one thread is steadier on a shared machine
    generator = torch.Generator().manual_seed(int(cfg.get("seed", 0)))
    size = int(cfg["image_size"])
    templates = torch.randn(NUM_CLASSES, 3, 4, 4, generator=generator)
    images, labels = make_images(int(cfg["pool_size"]), size, templates, generator)
    # One epoch covers the whole run: no epoch boundary inside the timed window.
    dataset = ReadyBatches(images, labels, int(cfg["batch_size"]), length=int(cfg["steps"]))

    eval_images, eval_labels = make_images(int(cfg.get("eval_size", 256)), size, templates, generator)
    eval_images, eval_labels = eval_images.to(device), eval_labels.to(device)
    model = make_model(str(cfg["arch"]), int(cfg.get("downscale", 1))).to(device)

    def eval_loss(trained: nn.Module) -> float:
        losses = [F.cross_entropy(trained(x), y, reduction="sum") for x, y in
                  zip(eval_images.split(64), eval_labels.split(64))]
        return (torch.stack(losses).sum() / len(eval_labels)).item()

    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, dataset=dataset)
