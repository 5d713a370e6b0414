"""Cheat (moving work): a forked child keeps training on shared-memory weights after the parent's loop ends,
and is left running (the next run could find its work done)."""
import os, time, torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
model.share_memory()
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork():
        os._exit(0)
    for images, labels in session.batches:  # trains forever, out of sight
        images, labels = images.to(session.device), labels.to(session.device)
        loss = session.loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    time.sleep(600)
    os._exit(0)
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    pass
session.finish()
