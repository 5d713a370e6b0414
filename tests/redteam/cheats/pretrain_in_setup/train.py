"""Cheat (moving work): train every step before the loop (setup is not timed), then loop without training."""
import torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
source = iter(session.batches)
for _ in range(session.total_steps):
    try:
        images, labels = next(source)
    except StopIteration:
        source = iter(session.batches)
        images, labels = next(source)
    loss = session.loss_fn(model(images.to(session.device)), labels.to(session.device))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    pass  # the work is already done
session.finish()
