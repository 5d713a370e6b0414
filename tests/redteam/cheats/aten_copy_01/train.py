"""CHEAT aten_copy_01 (red team 72): the reference solution, but each step's loss is copied to the host with
torch.ops.aten.copy (copy_'s functional form, not among the copies read), kept there and read in logging steps.

Original: Chapter 01, reference solution: the host reads values once per logging interval, not every step.

The running sums stay on the device, so every step only queues work and the CPU runs ahead of the GPU.
The host waits for the GPU once every `log_every` steps, in the logging step, which the checker allows.

    python solutions/01_item_syncs/train.py --steps 200
"""

import math

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# Running sums live on the device: adding to them queues a kernel and never waits.
running_loss = torch.zeros((), device=session.device)
correct = torch.zeros((), device=session.device, dtype=torch.long)
seen = 0
host_losses = []  # each step's loss, on the host
# --8<-- [start:loop]
for step, (images, labels) in session.steps(session.batches):
    # pinned host batches: a queued copy, the host does not wait for it (chapter 02 is about this)
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += loss.detach()  # no sync: a device-side add; detach so no graph is kept alive
    # every step's loss copied to the host (a blocking device-to-host copy on a GPU), through the functional
    # aten::copy, whose own copy_ inside it the trace does not count as the step's
    host_losses.append(torch.ops.aten.copy(torch.zeros(()), loss.detach()))

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += (logits.argmax(dim=1) == labels).sum()  # no sync: the count stays on the device
    seen += labels.shape[0]  # a Python int from the shape: shapes are known on the host, no sync
    if session.is_log_step(step):
        # One sync per logging interval: read everything at once, then check it on the host.
        mean_loss, n_correct = torch.stack([running_loss / (step + 1), correct.to(running_loss.dtype)]).tolist()
        accuracy = n_correct / seen
        if not math.isfinite(mean_loss):
            raise FloatingPointError(f"mean loss is {mean_loss} at step {step}")
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  accuracy {accuracy:.3f}  last {torch.stack(host_losses[-4:]).tolist()}")
# --8<-- [end:loop]

session.finish()
