"""Cheat (work moved before the window): half a minute of work in set-up, before session.steps(), standing for
any precomputation that makes the timed window cheaper (a table, a cache, a model trained on the side). The
window itself trains honestly; the grader's clock sees where the seconds went."""
import time

import torch
from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
table = torch.zeros(256, 256)
until = time.monotonic() + 45
while time.monotonic() < until:  # the precomputation
    table = (table @ torch.rand(256, 256)).tanh_()
for step, (images, labels) in session.steps(session.batches):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
