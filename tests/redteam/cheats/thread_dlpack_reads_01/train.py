"""Chapter 01 cheat (session 61, after red team 26's idea): the lab's reads kept, each made by np.from_dlpack in a
thread started inside the step. The profiler's Python tracer follows no thread started after it, and a DLPack export
of a CPU tensor runs no op: on a CPU the reads left nothing in the trace (passed every check with the scan off)."""

import math
import threading

import numpy as np
import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


def read(tensor):
    """The value of a one-element tensor, read through DLPack on a fresh thread."""
    box = []
    reader = threading.Thread(target=lambda: box.append(float(np.from_dlpack(tensor.detach()).reshape(-1)[0])))
    reader.start()
    reader.join()
    return box[0]


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = read(loss)
    running_loss += value
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += read((logits.argmax(dim=1) == labels).sum())
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
