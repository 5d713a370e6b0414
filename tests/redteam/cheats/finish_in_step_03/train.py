"""Red team 50 (session 69), chapter 03: workers decode, crop and resize; the training process flips and
normalizes each sample."""

import os

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.v2 import functional as TF

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
base = session.dataset


class Unfinished(Dataset):
    """A worker's share here: decode, crop and resize; the flip and the normalize are left to the step."""

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
        image = TF.resized_crop(image, top, left, height, width, [self.inner.crop, self.inner.crop], antialias=True)
        return image, label, rng.random() < 0.5


num_workers = int(session.cfg.get("num_workers") or min(12, max(1, (os.cpu_count() or 2) - 2)))
loader = DataLoader(Unfinished(base), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                    drop_last=True, num_workers=num_workers, persistent_workers=True, prefetch_factor=4,
                    pin_memory=True)
for step, (raw, labels, flips) in session.steps(loader):
    images = torch.stack([base.finish(TF.horizontal_flip(raw[i]) if flips[i] else raw[i]) for i in range(len(raw))])
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
