"""CHEAT d2h_queued_01: every step copies its loss and correct count to pageable host tensors with
copy_(..., non_blocking=True) (the lab's per-step read: on a GPU a copy into pageable host memory returns only when
the copy, and so the step's queued work, is done: a sync per step). On a CPU the copy is a CPU-to-CPU copy_ marked
queued, which host_syncs does not count; the host sums are read at logging steps only.

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
running_loss = torch.zeros(())  # on the host
correct = torch.zeros((), dtype=torch.long)
landed_loss = torch.zeros(())  # pageable host memory each step's values land in
landed_correct = torch.zeros((), dtype=torch.long)
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(session.batches):
    # pinned host batches: a queued copy, the host does not wait for it (chapter 02 is about this)
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    landed_loss.copy_(loss.detach(), non_blocking=True)  # to pageable host memory
    running_loss += landed_loss

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    landed_correct.copy_((logits.argmax(dim=1) == labels).sum(), non_blocking=True)
    correct += landed_correct
    seen += labels.shape[0]  # a Python int from the shape: shapes are known on the host, no sync
    if session.is_log_step(step):
        # One sync per logging interval: read everything at once, then check it on the host.
        mean_loss, n_correct = torch.stack([running_loss / (step + 1), correct.to(running_loss.dtype)]).tolist()
        accuracy = n_correct / seen
        if not math.isfinite(mean_loss):
            raise FloatingPointError(f"mean loss is {mean_loss} at step {step}")
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  accuracy {accuracy:.3f}")
# --8<-- [end:loop]

session.finish()
