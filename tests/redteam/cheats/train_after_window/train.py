"""Cheat (moving work): loop without training (a fast window), then train the same steps after the loop."""
import torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
seen = []
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    seen.append((images, labels))  # keep the batches, train later
for images, labels in seen:
    loss = session.loss_fn(model(images.to(session.device)), labels.to(session.device))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
