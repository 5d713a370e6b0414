"""Chapter 01: the loop as the lab writes it, every step reading the loss and the count back to the host."""

import math

import numpy as np

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# a host buffer and a DLPack view of it (np.from_dlpack), made before the loop; written through .data (its own version counter)
box = torch.zeros(2)
view = np.from_dlpack(box)  # a DLPack export, not Tensor.numpy

running_loss = 0.0
correct = 0
seen = 0
last = session.total_steps - 1
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    box.data[0].copy_(loss.detach())
    value = float(view[0])  # the loss, read on the host every step
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")
    running_loss += value

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    box.data[1].copy_((logits.argmax(dim=1) == labels).sum())
    correct += int(view[1])
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
    if step == last:
        del view  # gone before the window closes

session.finish()
