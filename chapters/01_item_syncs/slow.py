"""Chapter 01, the slow baseline: a training loop that reads values back to the host every step.

Each `.item()`, `float(t)` or `if t:` makes the CPU wait until the GPU has run every kernel queued so far,
so the CPU cannot queue the next work while the GPU computes: the two take turns instead of overlapping.

    python chapters/01_item_syncs/slow.py --steps 200

This file is the baseline the checker measures speedups against. Do not edit it: edit
labs/01_item_syncs/train.py.
"""

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

running_loss = 0.0
correct = 0
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(session.batches):
    # pinned host batches: a queued copy, the host does not wait for it (chapter 02 is about this)
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += loss.item()  # sync: the host waits for the whole forward pass
    if not torch.isfinite(loss):  # sync: `if tensor` is bool(tensor), a read like .item()
        raise FloatingPointError(f"loss is {loss} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += float((logits.argmax(dim=1) == labels).sum())  # sync: float(tensor) waits for backward + step
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {loss}")
# --8<-- [end:loop]

session.finish()
