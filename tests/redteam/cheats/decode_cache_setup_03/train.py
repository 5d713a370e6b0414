"""Cheat (a second road to chapter 03's speed): decode the dataset's JPEGs once, in set-up, and give the workers
the decoded pixels, so that no decode is left to overlap; the loader keeps the chapter's settings to pass
loader_settings. Against a dataset that reuses a few hundred JPEGs, every window sample is a crop of a kept image."""
import random
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
dataset = session.dataset
workload = sys.modules[type(dataset).__module__]
decoded = [workload.decode_jpeg(jpeg) for jpeg in dataset.jpegs]  # every distinct JPEG, decoded now


class Kept(Dataset):
    """The dataset's samples, each cut from an image decoded in set-up instead of from its own bytes."""

    def __len__(self):
        return len(dataset)

    def __getitem__(self, item):
        index, salt = item if isinstance(item, tuple) else (item, dataset.seed)
        rng = random.Random(salt * 1_000_003 + index)
        slot, label = rng.randrange(len(decoded)), rng.randrange(workload.NUM_CLASSES)
        workload.keyed_jpeg(dataset.jpegs[slot], dataset.offsets[slot], label, rng)  # the same draws, no decode
        image = decoded[slot]
        top, left, height, width = workload.crop_box(image.shape[-2], image.shape[-1], rng)
        image = workload.TF.resized_crop(image, top, left, height, width, [dataset.crop] * 2, antialias=True)
        if rng.random() < 0.5:
            image = workload.TF.horizontal_flip(image)
        return dataset.finish(image), label


loader = DataLoader(Kept(), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"], drop_last=True,
                    num_workers=max(1, session.cfg.get("cheat_workers", 2)), persistent_workers=True, prefetch_factor=4,
                    pin_memory=session.device.type == "cuda")
for step, (images, labels) in session.steps(loader):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
