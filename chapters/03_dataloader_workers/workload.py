"""Chapter 03's workload: JPEG images decoded and augmented on the CPU, sample by sample, then a ResNet.

This is what a real image pipeline does for every sample: decode a JPEG, pick a random box and resize it
(RandomResizedCrop), maybe flip it, convert to float and normalize, all with Pillow and
torchvision.transforms.v2. It costs up to a millisecond of one CPU core per sample: around a tenth of a
second per batch, several times what the GPU needs to train on that batch.

The JPEGs are synthetic (a smooth colour pattern per class, plus noise), encoded once in memory: nothing is
downloaded. The random choices of each sample are drawn from the sample's own seed and its epoch's salt (the
window key's, once the timed window is open), so every variant trains on the same pixels whatever the number
of worker processes, and none can make the window's samples before it.
"""

from __future__ import annotations

import io
import math
import random

import torch
from torch import nn
from torch.nn import functional as F
from PIL import Image
from torch.utils.data import Dataset
from torchvision.models import get_model
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from checker.base.stats import describe_step_times  # p50 / p90 / max / mean: the median alone can lie
from checker.base.workloads import KeyedEpochs, Workload

NUM_CLASSES = 10
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # ImageNet's channel statistics
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)  # RandomResizedCrop's defaults


def decode_jpeg(data: bytes) -> torch.Tensor:
    """JPEG bytes -> uint8 tensor, 3 x H x W, with Pillow (what torchvision's ImageFolder uses)."""
    return TF.pil_to_tensor(Image.open(io.BytesIO(data)).convert("RGB"))


def encode_jpeg(image: torch.Tensor, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def crop_box(height: int, width: int, rng: random.Random) -> tuple[int, int, int, int]:
    """RandomResizedCrop's choice of box (top, left, height, width), drawn from ``rng``."""
    for _ in range(10):
        area = height * width * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return 0, 0, height, width  # the whole image, as RandomResizedCrop falls back to


class AugmentedJpegs(Dataset):
    """Decode + RandomResizedCrop + horizontal flip + float + normalize, per sample, on the CPU."""

    def __init__(self, jpegs: list[bytes], labels: list[int], length: int, crop: int, seed: int):
        self.jpegs, self.labels, self.length, self.crop, self.seed = jpegs, labels, length, crop, seed
        self.finish = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        # KeyedEpochs gives (index, the epoch's salt): the random choices of an epoch that starts after the timed
        # window opened come from the window key, so none of its samples can be made before the window
        index, salt = item if isinstance(item, tuple) else (item, self.seed)
        slot = (index * 7919) % len(self.jpegs)
        image = decode_jpeg(self.jpegs[slot])  # uint8, 3 x H x W
        rng = random.Random(salt * 1_000_003 + index)  # this sample's own random choices
        top, left, height, width = crop_box(image.shape[-2], image.shape[-1], rng)
        image = TF.resized_crop(image, top, left, height, width, [self.crop, self.crop], antialias=True)
        if rng.random() < 0.5:
            image = TF.horizontal_flip(image)
        return self.finish(image), self.labels[slot]


def make_jpegs(count: int, size: int, templates: torch.Tensor, generator: torch.Generator) -> tuple[list[bytes], list[int]]:
    """``count`` JPEG-encoded uint8 images, each its class's colour pattern (a 4x4 template) plus noise."""
    labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator).tolist()
    jpegs = []
    for label in labels:
        pattern = F.interpolate(templates[label:label + 1], size=(size, size), mode="bilinear", align_corners=False)[0]
        noise = torch.rand(3, size, size, generator=generator)
        jpegs.append(encode_jpeg((pattern * 200 + noise * 55).to(torch.uint8), quality=90))
    return jpegs, labels


def eval_batch(jpegs: list[bytes], labels: list[int], crop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out images, decoded, resized and normalized without randomness."""
    finish = v2.Compose([v2.Resize(crop, antialias=True), v2.CenterCrop(crop),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    return torch.stack([finish(decode_jpeg(j)) for j in jpegs]), torch.tensor(labels)


def build(cfg: dict, device: torch.device) -> Workload:
    if device.type == "cuda":
        # cuDNN picks its algorithms by heuristics, not by timing them (benchmark mode): the timed pick differs
        # from run to run, and so would the numerics, which would blur the weights the referee compares
        torch.backends.cudnn.benchmark = False
    else:
        # On a CPU the model trains on one core, as on a GPU it has one device: the other cores are free for
        # loading, which is what this chapter measures.
        torch.set_num_threads(1)
    seed = int(cfg.get("seed", 0))
    generator = torch.Generator().manual_seed(seed)
    crop, batch_size = int(cfg["image_size"]), int(cfg["batch_size"])
    source = int(cfg["source_size"])
    templates = torch.rand(NUM_CLASSES, 3, 4, 4, generator=generator)
    jpegs, labels = make_jpegs(int(cfg["pool_size"]), source, templates, generator)
    # An epoch is epoch_batches batches: a run crosses epoch boundaries, where the workers' queue drains.
    dataset = AugmentedJpegs(jpegs, labels, int(cfg["epoch_batches"]) * batch_size, crop, seed)

    eval_images, eval_labels = eval_batch(*make_jpegs(int(cfg.get("eval_size", 256)), source, templates, generator), crop)
    eval_images, eval_labels = eval_images.to(device), eval_labels.to(device)
    model = get_model(str(cfg["arch"]), weights=None, num_classes=NUM_CLASSES).to(device)

    def eval_loss(trained: nn.Module) -> float:
        losses = [F.cross_entropy(trained(x), y, reduction="sum") for x, y in
                  zip(eval_images.split(64), eval_labels.split(64))]
        return (torch.stack(losses).sum() / len(eval_labels)).item()

    # A new shuffle every epoch, drawn from its own seeded generator: the same order in every variant, whatever
    # the DataLoader's workers do with the global random state.
    sampler = KeyedEpochs(len(dataset), seed + 1)
    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, dataset=dataset,
                    extras={"sampler": sampler, "step_times": describe_step_times}, on_window=sampler.set_key)
