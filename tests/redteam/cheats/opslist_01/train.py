"""Chapter 01: the lab's per-step reads kept, each made through a JIT-registered aten op."""

import math
import struct

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

as_ints = torch.ops.aten._tensor_to_list


def host_float(t):
    bits = as_ints(t.detach().reshape(1).view(torch.int32))[0]
    return struct.unpack("<f", struct.pack("<i", bits))[0]


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = host_float(loss)  # read every step, as the lab does
    running_loss += value
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += as_ints((logits.argmax(dim=1) == labels).sum().to(torch.int32).reshape(1))[0]
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
