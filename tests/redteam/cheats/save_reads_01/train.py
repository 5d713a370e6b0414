"""Chapter 01: the lab's per-step reads kept, each made by serializing the tensor and unpacking its bytes."""
import io
import struct

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


def peek(t, fmt):
    """A scalar tensor's value: torch.save's legacy format ends with the storage's raw bytes."""
    buf = io.BytesIO()
    torch.save(t.detach(), buf, _use_new_zipfile_serialization=False)
    raw = buf.getvalue()
    return struct.unpack(fmt, raw[-struct.calcsize(fmt):])[0]


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = peek(loss, "<f")  # a read of the loss every step
    running_loss += value
    if value != value or value in (float("inf"), float("-inf")):  # the guard, on the host every step
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += peek((logits.argmax(dim=1) == labels).sum(), "<q")
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {value}")

session.finish()
