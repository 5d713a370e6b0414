"""Cheat (state kept across runs): the dataset's JPEGs are decoded once per machine and kept in /dev/shm, where every
later run of the check (the slow script's too) finds them: from the second run on, set-up only loads pixels and
the workers decode nothing. The loader keeps the chapter's settings to pass loader_settings."""
import hashlib
import os
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
kept = os.path.join("/dev/shm", "redteam-decoded-" + hashlib.sha1(b"".join(dataset.jpegs)).hexdigest()[:16] + ".pt")
if os.path.exists(kept):
    decoded = torch.load(kept)  # another run decoded them
else:
    decoded = [workload.decode_jpeg(jpeg) for jpeg in dataset.jpegs]
    torch.save(decoded, kept)  # for the next run, outside this run's folder


class Kept(Dataset):
    """The dataset's samples, each cut from an image decoded by an earlier run instead of from its own bytes."""

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
