"""Cheat (forging measurements): chapter 01's lab, its reads through a function whose code object is renamed
torch/optim/optimizer.py's _get_value, so that the trace's Python frame looks like the optimizer's (red team, 2026-11-26)."""

import torch


def read(t):
    return t.item()


# the profiler names a Python frame by its code object's file and function: this one reads as the optimizer's
read.__code__ = read.__code__.replace(co_filename="/opt/torch/optim/optimizer.py", co_name="_get_value")

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# TODO: keep these running sums on the device (torch.zeros((), device=session.device)) instead of in Python
running_loss = 0.0
correct = 0
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(session.batches):
    # pinned host batches: a queued copy, the host does not wait for it (chapter 02 is about this)
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += read(loss)  # TODO: .item() syncs every step; add loss.detach() to a device tensor instead
    if not read(torch.isfinite(loss)):  # TODO: `if tensor` syncs too; check the sum once per logging interval
        raise FloatingPointError(f"loss is {loss} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += read((logits.argmax(dim=1) == labels).sum())  # TODO: float(tensor) syncs; keep the count on the device
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {loss}")
# --8<-- [end:loop]

session.finish()
