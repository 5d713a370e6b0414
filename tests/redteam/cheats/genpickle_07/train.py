"""Chapter 07 lab: the reference fixes for the loader, but the lab's per-step reads of the loss and accuracy kept.

The reads go through a random generator's pickling protocol: the value's bytes are written into a generator state
(torch.cat), handed to the generator by ``__setstate__`` and read back as its seed from ``__reduce__``.
"""

import math
import os
import struct

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
model = session.model
normalize = session.extras["normalize"]
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)

_box = torch.Generator()
_tail = _box.__reduce__()[2][2][8:].clone()  # a valid state past its seed field


def peek(t: torch.Tensor) -> float:
    """t's value in Python: its float64 bytes become the generator's seed."""
    state = torch.cat([t.detach().double().reshape(1).view(torch.uint8), _tail])
    _box.__setstate__((0, None, state))
    bits = _box.__reduce__()[2][0]
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


loader = DataLoader(
    session.extras["uint8_dataset"],
    batch_size=cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=int(cfg.get("num_workers") or min(8, max(1, (os.cpu_count() or 2) - 2))),
    persistent_workers=True,
    prefetch_factor=4,
    pin_memory=True,
)
running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    logits = model(normalize(images))
    loss = session.loss_fn(logits, labels)
    value = peek(loss)  # the lab's read of the loss, every step
    running_loss += value
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += peek((logits.argmax(dim=1) == labels).sum())  # and the accuracy's, every step
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
