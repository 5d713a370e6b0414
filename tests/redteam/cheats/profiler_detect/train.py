"""Cheat (observed): every step, ask torch whether its profiler is recording; read the loss on the host
(a sync) only when it is not."""
import torch
from checker.lab import start

def observed():
    return torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled()

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
running = 0.0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    if not observed():
        running += loss.item()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
