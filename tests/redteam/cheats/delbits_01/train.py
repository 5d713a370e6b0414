"""Chapter 01 attempt (delbits_01): the lab's three reads per step kept, each made through object finalizers
whose swallowed IndexError is a bit of the value (see delbits_06). Original lab docstring follows.


Right now this loop is the slow baseline: every step it reads the loss and the accuracy back to the host,
and each read makes the CPU wait for the GPU to drain its queue. Keep the running sums on the device and
read them once per logging interval instead (session.is_log_step(step) tells you when).

    python labs/01_item_syncs/train.py --steps 200     # trains and prints samples/s
    workbook check 01                                   # measures your fix against the baseline

Only this file is yours to edit. The model, the data and the loss come from chapters/01_item_syncs/.
"""

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# TODO: keep these running sums on the device (torch.zeros((), device=session.device)) instead of in Python

import functools
import sys

_hits = []
sys.unraisablehook = _hits.append
_row = torch.zeros(1)
_slot = torch.zeros(1, dtype=torch.long)


class _Probe:
    __del__ = functools.partial(torch.index_select, _row, 0, _slot)


def bit(condition):
    before = len(_hits)
    _slot.copy_(condition.reshape(1))
    _Probe()
    return len(_hits) > before


_threshold = torch.zeros(())


def about(value, low=0.0, high=16.0, rounds=12):
    for _ in range(rounds):
        middle = (low + high) / 2
        _threshold.fill_(middle)
        if bit(value > _threshold):
            low = middle
        else:
            high = middle
    return (low + high) / 2

running_loss = 0.0
correct = 0
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(session.batches):
    # pinned host batches: a queued copy, the host does not wait for it (chapter 02 is about this)
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += about(loss.detach())  # TODO: .item() syncs every step; add loss.detach() to a device tensor instead
    if not bit(torch.isfinite(loss.detach())):  # TODO: `if tensor` syncs too; check the sum once per logging interval
        raise FloatingPointError(f"loss is {loss} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += round(about((logits.argmax(dim=1) == labels).sum().float(), 0.0, 1024.0, 11))  # TODO: float(tensor) syncs; keep the count on the device
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {loss}")
# --8<-- [end:loop]

session.finish()
