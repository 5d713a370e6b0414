"""Cheat (less work): train only the second half of the model (a narrower backward pass)."""
import torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
params = list(model.parameters())
for p in params[: len(params) // 2]:
    p.requires_grad_(False)
optimizer = torch.optim.SGD([p for p in params if p.requires_grad], lr=session.cfg["lr"], momentum=0.9)
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
