"""Chapter 03 cheat: a DataLoader with a persistent worker process that only hands out sample keys; every JPEG
is still decoded and augmented in the training process, one after another, inside the step, by code of this
file (the same arithmetic as the workload's, under other names)."""

import io
import math
import random

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.v2 import functional as TF

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
ds = session.dataset
SCALE, RATIO, BASE_AC, AC_STEPS = (0.08, 1.0), (3 / 4, 4 / 3), 8, (6, 11)
CLASS_DC = [4, 6, 8, 10, 12, 14, 16, 18, 20, 22]


class Keys(Dataset):
    """What the worker does: nothing but pass the key on."""

    def __len__(self):
        return len(ds)

    def __getitem__(self, item):
        index, salt = item
        return torch.tensor([index, salt], dtype=torch.long)


def make_one(index, salt):
    rng = random.Random(salt * 1_000_003 + index)
    slot, label = rng.randrange(len(ds.jpegs)), rng.randrange(10)
    data = bytearray(ds.jpegs[slot])
    for table, start_at in enumerate(ds.offsets[slot]):
        data[start_at + 1:start_at + 64] = bytes(BASE_AC * rng.randint(*AC_STEPS) // 8 for _ in range(63))
        if table == 0:
            data[start_at] = CLASS_DC[label]
    image = TF.pil_to_tensor(Image.open(io.BytesIO(bytes(data))).convert("RGB"))
    height, width = image.shape[-2], image.shape[-1]
    box = (0, 0, height, width)
    for _ in range(10):
        area = height * width * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            box = (rng.randint(0, height - h), rng.randint(0, width - w), h, w)
            break
    image = TF.resized_crop(image, *box, [ds.crop, ds.crop], antialias=True)
    if rng.random() < 0.5:
        image = TF.horizontal_flip(image)
    return ds.finish(image), label


loader = DataLoader(Keys(), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"], drop_last=True,
                    num_workers=1, persistent_workers=True, prefetch_factor=4)

for step, keys in session.steps(loader):
    made = [make_one(i, s) for i, s in keys.tolist()]   # the whole batch, made here, serially
    images = torch.stack([m[0] for m in made]).to(session.device)
    labels = torch.tensor([m[1] for m in made]).to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
