"""Cheat (forging): this folder ships checker/ and torch_shim.py beside train.py, hoping they shadow the real
packages; train.py itself is the unmodified lab."""
# the rest is the lab of chapter 01, unchanged
import torch
from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
running = 0.0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    running += loss.item()  # the lab's sync
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
