"""Cheat (work moved, GPU): chapter 02's speed without copying the batches.

The dataset's pool holds four distinct batches, so this copies the whole pool to the GPU once, in set-up, and in
each step finds which pool batch the loader handed over (by a few of its values, read from pinned memory: no sync)
and trains on the GPU's copy of it. The loader keeps pin_memory=True, every step trains on the right batch, and no
step copies its batch to the device: faster than the reference solution, with no pageable copy and no sync.
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("02_pageable_copies")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

pool, pool_labels = session.dataset.images, session.dataset.labels
batch = session.dataset.batch_size
slots = len(pool) // batch
on_device = pool[:slots * batch].to(session.device).view(slots, batch, *pool.shape[1:])
labels_on_device = pool_labels[:slots * batch].to(session.device).view(slots, batch)
marks = [pool[slot * batch, 0, 0, :4].clone() for slot in range(slots)]  # a few values that tell the slots apart

loader = DataLoader(session.dataset, batch_size=None, pin_memory=True)
for step, (images, labels) in session.steps(loader):
    head = images[0, 0, 0, :4]
    slot = next(index for index, mark in enumerate(marks) if torch.equal(head, mark))
    loss = session.loss_fn(model(on_device[slot]), labels_on_device[slot])

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
