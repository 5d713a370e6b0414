"""Cheat (moving work): fetch every batch before the window (host preparation is part of the step), then
train in the loop on the prefetched batches, ignoring the ones the harness fetches in the data range."""
import math, torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
ready = [b for _, b in zip(range(session.total_steps), iter(session.batches))]
for step, _ in session.steps([(torch.zeros(1), torch.zeros(1))]):
    images, labels = ready[step]
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
