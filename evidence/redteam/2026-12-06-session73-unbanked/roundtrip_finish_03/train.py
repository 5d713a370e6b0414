"""Chapter 03: the workers decode, crop and resize; the training process flips and normalizes every batch in its
steps, and the worker hands the finished pixels back, so the batch the loader hands over is finished.

A single persistent worker reads each epoch's order from the salt its first keys carry (the sampler's shuffle is
seeded by it). Collating batch n it also decodes, crops and resizes batch n+LOOK (uint8) and sends those crops, their
flips and an empty shared-memory slot with batch n. In step n the training process flips and normalizes them and
writes the result into the slot; the worker, collating batch n+LOOK, waits for the slot and returns its contents
as that batch's images. The first LOOK batches of each epoch the worker prepares whole, as the dataset does.
"""

import io
import math
import random
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.v2 import functional as TF

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

DATASET = session.dataset
B, EB = int(session.cfg["batch_size"]), int(session.cfg["epoch_batches"])
CROP = DATASET.crop
LOOK = 2
NUMEL = B * 3 * CROP * CROP
CLASS_DC = [4, 6, 8, 10, 12, 14, 16, 18, 20, 22]
BASE_AC, AC_STEPS = 8, (6, 11)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


# --- the worker's part: decode, crop and resize (the dataset's own steps, without the flip and the normalization)
def keyed(base, offsets, label, rng):
    data = bytearray(base)
    for table, begin in enumerate(offsets):
        data[begin + 1:begin + 64] = bytes(BASE_AC * rng.randint(*AC_STEPS) // 8 for _ in range(63))
        if table == 0:
            data[begin] = CLASS_DC[label]
    return bytes(data)


def box(height, width, rng):
    for _ in range(10):
        area = height * width * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return 0, 0, height, width


def raw_sample(key):
    index, salt = key
    rng = random.Random(salt * 1_000_003 + index)
    slot, label = rng.randrange(len(DATASET.jpegs)), rng.randrange(len(CLASS_DC))
    jpeg = keyed(DATASET.jpegs[slot], DATASET.offsets[slot], label, rng)
    image = TF.pil_to_tensor(Image.open(io.BytesIO(jpeg)).convert("RGB"))
    top, left, height, width = box(image.shape[-2], image.shape[-1], rng)
    image = TF.resized_crop(image, top, left, height, width, [CROP, CROP], antialias=True)
    return image, rng.random() < 0.5


def label_of(key):
    index, salt = key
    rng = random.Random(salt * 1_000_003 + index)
    rng.randrange(len(DATASET.jpegs))
    return rng.randrange(len(CLASS_DC))


def epoch_order(salt):
    order = list(range(len(DATASET)))
    random.Random(salt).shuffle(order)
    return [(index, salt) for index in order]


class Keys(Dataset):
    def __len__(self):
        return len(DATASET)

    def __getitem__(self, item):
        return item


_SLOTS = {}
_STATE = {"n": 0, "salt": None, "b": 0}


def collate(keys):  # in the worker
    n = _STATE["n"]
    _STATE["n"] += 1
    salt = keys[0][1]
    if salt != _STATE["salt"]:
        _STATE["salt"], _STATE["b"] = salt, 0
    within = _STATE["b"]
    _STATE["b"] += 1
    labels = torch.tensor([label_of(key) for key in keys])
    ahead = ()
    if within + LOOK < EB:  # the later batch of this epoch: decoded, cropped and resized here, finished there
        later = epoch_order(salt)[(within + LOOK) * B:(within + LOOK + 1) * B]
        made = [raw_sample(key) for key in later]
        handed = torch.zeros(1 + NUMEL)
        _SLOTS[n + LOOK] = handed
        ahead = (torch.stack([image for image, _ in made]), [flip for _, flip in made], handed)
    slot = _SLOTS.pop(n, None)
    if slot is not None:
        while slot[0].item() == 0:
            time.sleep(0.0002)
        images = slot[1:].view(B, 3, CROP, CROP).clone()
    else:
        images = torch.stack([DATASET[key][0] for key in keys])
    return images, labels, ahead


loader = DataLoader(Keys(), batch_size=B, sampler=session.extras["sampler"], drop_last=True, num_workers=1,
                    persistent_workers=True, prefetch_factor=2, collate_fn=collate)

for step, (images, labels, ahead) in session.steps(loader):
    if ahead:  # the flip and the normalization of a later batch, in this step
        crops, flips, slot = ahead
        flipped = torch.stack([TF.horizontal_flip(image) if flip else image for image, flip in zip(crops, flips)])
        slot[1:].copy_(DATASET.finish(flipped).flatten())
        slot[:1].fill_(1.0)
        del crops, flips, slot, flipped
    del ahead
    images = images.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
