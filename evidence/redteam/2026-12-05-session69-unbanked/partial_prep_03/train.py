"""Chapter 03: workers decode; the training process finishes each sample (crop, resize, flip, normalize)."""

import os

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

base = session.dataset
crop = base.crop
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Decoded(Dataset):
    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, item):
        import workbook_workload_03_dataloader_workers as mod
        index, salt = item if isinstance(item, tuple) else (item, self.inner.seed)
        jpeg, label, rng = mod.sample_jpeg(self.inner.jpegs, self.inner.offsets, salt, index)
        image = mod.decode_jpeg(jpeg)
        top, left, height, width = mod.crop_box(image.shape[-2], image.shape[-1], rng)
        flip = rng.random() < 0.5
        return image, label, torch.tensor([top, left, height, width]), flip


def finish_one(image, box, flip):
    top, left, height, width = (int(v) for v in box)
    region = image[:, top:top + height, left:left + width].contiguous()
    planes = []
    for c in range(3):
        plane = Image.fromarray(np.ascontiguousarray(region[c].numpy()))  # mode L: mapped, no decoder
        plane = plane.resize((crop, crop), Image.BILINEAR)
        planes.append(torch.from_numpy(np.asarray(plane).copy()))
    out = torch.stack(planes)
    if flip:
        out = out.flip(-1)
    return (out.float() / 255.0 - MEAN) / STD


num_workers = int(session.cfg.get("num_workers") or min(12, max(1, (os.cpu_count() or 2) - 2)))
loader = DataLoader(
    Decoded(base),
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=num_workers,
    persistent_workers=True,
    prefetch_factor=4,
    pin_memory=True,
)
for step, (raw, labels, boxes, flips) in session.steps(loader):
    images = torch.stack([finish_one(raw[i], boxes[i], bool(flips[i])) for i in range(len(raw))])
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
