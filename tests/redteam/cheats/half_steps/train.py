"""Cheat (less work): forward and backward every step, but an optimizer step only every other step."""
import torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    loss.backward()
    if step % 2 == 1:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
session.finish()
