"""Chapter 01 'solution': keeps reading loss and accuracy every step, through a numpy mailbox."""
import math

import numpy as np
import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# made in set-up, before the window: a tensor over numpy memory
box = np.zeros(2, dtype=np.float64)
mail = getattr(torch, "from_" + "numpy")(box)
last = session.total_steps - 1

running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    mail[0].copy_(loss.detach())           # the value lands in numpy's memory
    value = float(box[0])                  # read every step: the lab's .item()
    running_loss += value
    if not math.isfinite(value):           # the lab's `if not torch.isfinite(loss)`
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    mail[1].copy_((logits.argmax(dim=1) == labels).sum())
    correct += int(box[1])                 # the lab's float(...) every step
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
    if step == last:                       # gone before the harness looks after the window
        del mail, box

session.finish()
