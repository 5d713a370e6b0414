"""Cheat (moving work): the lab's syncs, with 200 empty extra `step N` ranges per real step so that syncs
per step look like almost none."""
import torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
running = 0.0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    running += loss.item()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    for extra in range(200):
        with torch.profiler.record_function(f"step {1000 + step * 200 + extra}"):
            pass
session.finish()
