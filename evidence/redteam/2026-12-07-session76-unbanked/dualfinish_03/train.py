"""Chapter 03 attempt (red team 61): red team 50's finish_in_step_03 (workers decode, crop and resize; the step
flips and normalizes) made to pass the finished-batch audit by handing over both. The worker makes each sample as
the dataset does, up to its resize, and returns the dataset's finished sample (first 4-D tensor: what the audit
compares) and the resized, unflipped uint8 crop with its flip draw. The step ignores the finished batch: it flips
and normalizes the crops itself, in the training process, and trains on those (the same values, bit for bit)."""

import os

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.v2 import functional as TF

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
base = session.dataset
WORKLOAD = type(base).__getitem__.__globals__  # the dataset's own module: its sampling, decoding and crop helpers
sample_jpeg, decode_jpeg, crop_box = WORKLOAD["sample_jpeg"], WORKLOAD["decode_jpeg"], WORKLOAD["crop_box"]


class FinishedAndRaw(Dataset):
    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, item):
        ds = self.inner
        index, salt = item if isinstance(item, tuple) else (item, ds.seed)
        jpeg, label, rng = sample_jpeg(ds.jpegs, ds.offsets, salt, index)
        image = decode_jpeg(jpeg)
        top, left, height, width = crop_box(image.shape[-2], image.shape[-1], rng)
        image = TF.resized_crop(image, top, left, height, width, [ds.crop, ds.crop], antialias=True)
        flip = rng.random() < 0.5
        finished = ds.finish(TF.horizontal_flip(image) if flip else image)  # the dataset's sample, exactly
        return finished, label, image, flip


num_workers = int(session.cfg.get("num_workers") or min(12, max(1, (os.cpu_count() or 2) - 2)))
loader = DataLoader(FinishedAndRaw(base), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                    drop_last=True, num_workers=num_workers, persistent_workers=True, prefetch_factor=4,
                    pin_memory=True)
for step, (finished, labels, crops, flips) in session.steps(loader):
    # the step finishes every sample itself: the flip and the normalization, in the training process
    images = torch.stack([base.finish(TF.horizontal_flip(crop) if flip else crop)
                          for crop, flip in zip(crops, flips.tolist())])
    if step == 0:
        assert torch.equal(images, finished)  # the workers' finished batch, made again here
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
