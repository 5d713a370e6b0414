"""Chapter 01: the lab's per-step reads made on a thread started in set-up (before the profiler): its ops are not
recorded by a profiler started later."""
from concurrent.futures import ThreadPoolExecutor

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
pool = ThreadPoolExecutor(1)
pool.submit(lambda: None).result()  # the thread exists before the window
running_loss = 0.0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)
    value = pool.submit(loss.item).result()  # the lab's read, every step
    running_loss += value
    if value != value:
        raise FloatingPointError("nan")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}")
session.finish()
