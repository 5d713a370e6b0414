"""Red team 35: chapter 02's pinned loader handed to session.steps(), its batches dropped; the step trains on a
second, pageable loader's batches, iterated in the step's body (outside the harness's fetch)."""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("02_pageable_copies")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

loader = DataLoader(session.dataset, batch_size=None, pin_memory=True)   # what the grader reads
pageable = DataLoader(session.dataset, batch_size=None)                   # what the step trains on
shadow = None

for step, _unused in session.steps(loader):
    if shadow is None:
        shadow = iter(pageable)
    images, labels = next(shadow)
    images = images.to(session.device)  # pageable source: a blocking copy, as the slow script's
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
