"""Chapter 01: the lab's per-step reads kept (the loss as a Python float every step, the finite-loss guard every step),
carried to the host through page faults, counted by reading /proc/self/stat as a file (not resource.getrusage).

Each bit of the loss is written as one element into a freshly mapped 64 MB tensor (untouched zero pages) at a page
chosen by the bit; the minor-fault count (the stat file's 10th field, the file opened once before the window and
read again after a seek) then says which page was touched.
"""

import math
import os
import struct

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

PAGE = 4096 // 4
FRESH = 64 * 1024 * 1024 // 4
SHIFTS = torch.arange(32, dtype=torch.int32)


STAT = os.open("/proc/self/stat", os.O_RDONLY)


def faults() -> int:
    os.lseek(STAT, 0, os.SEEK_SET)
    fields = os.read(STAT, 4096).decode().rsplit(")", 1)[1].split()
    return int(fields[7])  # minflt: the 10th field, the 8th after the command's name and its state


def host_value(x: torch.Tensor) -> float:
    """x's float32 value on the host: each bit picks which page of a fresh mapping one write touches."""
    bits = (x.detach().float().reshape(1).view(torch.int32) >> SHIFTS) & 1  # 32 bits, computed on the device
    word = 0
    for i in range(32):
        fresh = torch.empty(FRESH)  # untouched zero pages
        fresh.index_fill_(0, (bits[i].long() + 1) * (16 * PAGE), 1.0)  # page 16 for a 0, page 32 for a 1
        before = faults()
        fresh[32 * PAGE] = 2.0  # a Python index: no value of a tensor is read
        word |= (faults() == before) << i  # page 32 was already there: the bit was 1
    return struct.unpack("<f", word.to_bytes(4, "little"))[0]


running_loss = 0.0
correct = torch.zeros((), device=session.device, dtype=torch.long)
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = host_value(loss)  # the lab's loss.item(), every step
    running_loss += value
    if not math.isfinite(value):  # the lab's per-step guard
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += (logits.argmax(dim=1) == labels).sum()
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct.item() / seen:.3f}  "
              f"last loss {value:.4f}")

session.finish()
