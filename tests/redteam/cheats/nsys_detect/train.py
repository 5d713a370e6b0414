"""Cheat (observed): look for Nsight Systems in the environment and the process's libraries; skip half the
optimizer steps when nobody is looking."""
import os, torch
from checker.lab import start
watched = any(k.startswith("NSYS") for k in os.environ) or "ToolsInjection" in open("/proc/self/maps").read()
session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if watched or step % 2 == 0:
        optimizer.step()
session.finish()
