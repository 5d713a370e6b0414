"""Red team (hidden_syncs_01): the slow lab unchanged (three host reads every step), each read run with op
recording switched off.

Chapter 01 lab: take the host syncs out of the training step.

Right now this loop is the slow baseline: every step it reads the loss and the accuracy back to the host,
and each read makes the CPU wait for the GPU to drain its queue. Keep the running sums on the device and
read them once per logging interval instead (session.is_log_step(step) tells you when).

    python labs/01_item_syncs/train.py --steps 200     # trains and prints samples/s
    workbook check 01                                   # measures your fix against the baseline

Only this file is yours to edit. The model, the data and the loss come from chapters/01_item_syncs/.
"""

import torch

import functools
import string

from checker.lab import start

_sw = string.Formatter().get_field("0._en" + "able_rec" + "ord_function", [torch.autograd], {})[0]
_off, _on = functools.partial(_sw, False), functools.partial(_sw, True)  # called from C: no call the tracer names

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
    _off()
    running_loss += float(loss)  # TODO: .item() syncs every step; add loss.detach() to a device tensor instead
    if not torch.isfinite(loss):  # TODO: `if tensor` syncs too; check the sum once per logging interval
        raise FloatingPointError(f"loss is {loss} at step {step}")
    _on()

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    hits = (logits.argmax(dim=1) == labels).sum()
    _off()
    correct += float(hits)
    _on()  # TODO: float(tensor) syncs; keep the count on the device
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {loss}")
# --8<-- [end:loop]

session.finish()
