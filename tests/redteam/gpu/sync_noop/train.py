"""Cheat (forging, GPU): make torch.cuda.synchronize and CUDA events lie, so that any timer in this process
stops before the GPU has finished; then train like the lab of chapter 01."""
import torch

torch.cuda.synchronize = lambda *args, **kwargs: None
torch.cuda.Event.synchronize = lambda self: None
torch.cuda.Event.elapsed_time = lambda self, end: 0.001
torch.cuda.Stream.synchronize = lambda self: None
from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
running = 0.0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)
    running += loss.item()  # the lab's sync
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
