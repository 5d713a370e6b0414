"""Cheat (less work, GPU): the reference solution of chapter 02 with an optimizer step only every other step."""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("02_pageable_copies")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# --8<-- [start:loader]
loader = DataLoader(
    session.dataset,
    batch_size=None,  # the dataset's items are whole batches, ready in memory: loading costs nothing here
    pin_memory=True,  # batches arrive page-locked: the loader copies each into page-locked memory
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    # From pinned memory, non_blocking=True queues a DMA copy and returns at once. (From pageable memory it
    # would still wait; and a blocking copy from pinned memory would wait too: both changes are needed.)
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)  # queued behind the copy on the same stream: no race

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if step % 2 == 1:  # the cheat: half the optimizer steps
        optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

session.finish()
