"""Chapter 03's workload: JPEG images decoded and augmented on the CPU, sample by sample, then a ResNet.

This is what a real image pipeline does for every sample: decode a JPEG, pick a random box and resize it
(RandomResizedCrop), maybe flip it, convert to float and normalize, all with Pillow and
torchvision.transforms.v2. It costs up to a millisecond of one CPU core per sample: around a tenth of a
second per batch, several times what the GPU needs to train on that batch.

The JPEGs are synthetic and made in memory: nothing is downloaded. Every sample is a JPEG of its own, never
decoded before in the run: a pool of base JPEGs (a random colour pattern, plus noise) is encoded once, and each
sample's bytes are one of them with quantization tables of the sample's own (`keyed_jpeg`), drawn from the
sample's seed and its epoch's salt (the window key's, once the timed window is open). The class lives there
alone: a class's luma DC step sets the image's brightness, and every other step of both tables is drawn at
random, so a sample's pixels exist only once its bytes are decoded. Images decoded once and kept (in set-up, in
a warm-up step, in a file another run left) are the wrong images: the class is not in them. The same draws give
each sample's crop and flip, so every variant trains on the same pixels whatever the number of worker
processes, and none can make the window's samples before it.
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


# A class's luma DC quantization step. Base images are encoded with DC step BASE_DC over a mean luma near 48, so
# a decoder lands the mean near 128 - 5 * step: class 0 at 108, class 9 at 18 (JPEG's DC is a block's mean).
CLASS_DC = [4, 6, 8, 10, 12, 14, 16, 18, 20, 22]
BASE_DC, BASE_AC = 16, 8  # the base encoding's steps: each sample's AC steps are BASE_AC scaled by 6/8 .. 11/8
AC_STEPS = (6, 11)


def decode_jpeg(data: bytes) -> torch.Tensor:
    """JPEG bytes -> uint8 tensor, 3 x H x W, with Pillow (what torchvision's ImageFolder uses)."""
    return TF.pil_to_tensor(Image.open(io.BytesIO(data)).convert("RGB"))


def encode_base(ycbcr: torch.Tensor) -> bytes:
    """A uint8 Y, Cb, Cr image (3 x H x W) as a baseline JPEG with the base steps (4:2:0, as most JPEGs are)."""
    luma, chroma = [BASE_DC] + [BASE_AC] * 63, [BASE_AC] * 64
    buffer = io.BytesIO()
    Image.fromarray(ycbcr.permute(1, 2, 0).numpy(), mode="YCbCr").save(
        buffer, format="JPEG", qtables=[luma, chroma], subsampling=2)
    return buffer.getvalue()


def table_offsets(jpeg: bytes) -> list[int]:
    """Where each 8-bit quantization table's 64 steps start in ``jpeg``, in table-id order (luma, chroma)."""
    found, at = {}, 2
    while at + 4 <= len(jpeg) and jpeg[at] == 0xFF:
        marker, length = jpeg[at + 1], int.from_bytes(jpeg[at + 2:at + 4], "big")
        if marker == 0xDA:  # start of scan: the tables are all before it
            break
        if marker == 0xDB:
            inside = at + 4
            while inside < at + 2 + length:
                precision, table = jpeg[inside] >> 4, jpeg[inside] & 0x0F
                if precision:
                    raise ValueError("16-bit quantization tables are not made here")
                found[table] = inside + 1
                inside += 65
        at += 2 + length
    return [found[t] for t in sorted(found)]


def keyed_jpeg(base: bytes, offsets: list[int], label: int, rng: random.Random) -> bytes:
    """``base`` with quantization steps of this sample's own: the class's luma DC step, every AC step drawn."""
    data = bytearray(base)
    for table, start in enumerate(offsets):
        data[start + 1:start + 64] = bytes(BASE_AC * rng.randint(*AC_STEPS) // 8 for _ in range(63))
        if table == 0:
            data[start] = CLASS_DC[label]
    return bytes(data)


def crop_box(height: int, width: int, rng: random.Random) -> tuple[int, int, int, int]:
    """RandomResizedCrop's choice of box (top, left, height, width), drawn from ``rng``."""
    for _ in range(10):
        area = height * width * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return 0, 0, height, width  # the whole image, as RandomResizedCrop falls back to


def sample_jpeg(jpegs: list[bytes], offsets: list[list[int]], salt: int, index: int) -> tuple[bytes, int, random.Random]:
    """Sample ``index`` of the epoch salted ``salt``: its JPEG (distinct from every other sample's), its label, and
    the random state its crop and flip are drawn from next."""
    rng = random.Random(salt * 1_000_003 + index)  # this sample's own random choices
    slot, label = rng.randrange(len(jpegs)), rng.randrange(NUM_CLASSES)
    return keyed_jpeg(jpegs[slot], offsets[slot], label, rng), label, rng


class AugmentedJpegs(Dataset):
    """Decode + RandomResizedCrop + horizontal flip + float + normalize, per sample, on the CPU."""

    def __init__(self, jpegs: list[bytes], length: int, crop: int, seed: int):
        self.jpegs, self.length, self.crop, self.seed = jpegs, length, crop, seed
        self.offsets = [table_offsets(jpeg) for jpeg in jpegs]
        self.finish = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        # KeyedEpochs gives (index, the epoch's salt): the random choices of an epoch that starts after the timed
        # window opened come from the window key, so none of its samples can be made before the window
        index, salt = item if isinstance(item, tuple) else (item, self.seed)
        jpeg, label, rng = sample_jpeg(self.jpegs, self.offsets, salt, index)
        image = decode_jpeg(jpeg)  # uint8, 3 x H x W: a JPEG no earlier sample had
        top, left, height, width = crop_box(image.shape[-2], image.shape[-1], rng)
        image = TF.resized_crop(image, top, left, height, width, [self.crop, self.crop], antialias=True)
        if rng.random() < 0.5:
            image = TF.horizontal_flip(image)
        return self.finish(image), label


def make_jpegs(count: int, size: int, generator: torch.Generator) -> list[bytes]:
    """``count`` base JPEGs of no class: an even luma near 48 with noise, and a random colour pattern (a 4x4
    template) in the chroma planes."""
    jpegs = []
    for _ in range(count):
        template = torch.rand(1, 2, 4, 4, generator=generator) * 2 - 1
        pattern = F.interpolate(template, size=(size, size), mode="bilinear", align_corners=False)[0]
        noise = torch.rand(3, size, size, generator=generator)
        luma = 40 + noise[:1] * 16
        chroma = 128 + pattern * 40 + (noise[1:] - 0.5) * 16
        jpegs.append(encode_base(torch.cat([luma, chroma]).round().clamp(0, 255).to(torch.uint8)))
    return jpegs


def eval_batch(jpegs: list[bytes], salt: int, count: int, crop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out samples (keyed JPEGs of their own salt), decoded, resized and normalized without randomness."""
    finish = v2.Compose([v2.Resize(crop, antialias=True), v2.CenterCrop(crop),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    offsets = [table_offsets(jpeg) for jpeg in jpegs]
    samples = [sample_jpeg(jpegs, offsets, salt, index)[:2] for index in range(count)]
    return torch.stack([finish(decode_jpeg(j)) for j, _ in samples]), torch.tensor([label for _, label in samples])


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
    jpegs = make_jpegs(int(cfg["pool_size"]), source, generator)
    # An epoch is epoch_batches batches: a run crosses epoch boundaries, where the workers' queue drains.
    dataset = AugmentedJpegs(jpegs, int(cfg["epoch_batches"]) * batch_size, crop, seed)

    # held out: base JPEGs of their own, keyed with a salt no training epoch uses
    held_out = make_jpegs(max(8, int(cfg.get("eval_size", 256)) // 4), source, generator)
    eval_images, eval_labels = eval_batch(held_out, -seed - 1, int(cfg.get("eval_size", 256)), crop)
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
